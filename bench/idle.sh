#!/bin/sh
# The board's idle CPU over 62 s, on a ledger you already have (run by hand; figures in
# docs/board.md). The board runs in a private tmux server, 200x50; once its first reads are
# over (under 2 % of a core for 3 s) its CPU and its waited-for children's are counted for 62 s,
# a window longer than the 30-s full read the board had before.
#
#   LANEBOARD_HOME=/path/to/home PYTHONPATH=/path/to/checkout sh bench/idle.sh LABEL [REPO]
#
# LANEBOARD_HOME, HOME, git's config and LANEBOARD_TMUX_SOCKET are taken from the environment
# (point them at the benchmark's own, never at yours).
L=${1:-board}; REPO=${2:-.}
PY=${PYTHON:-python3}
script=$(mktemp)
{
  for v in LANEBOARD_HOME HOME GIT_CONFIG_NOSYSTEM GIT_CONFIG_GLOBAL PYTHONPATH LANEBOARD_TMUX_SOCKET; do
    eval "val=\${$v-}"
    [ -n "$val" ] && printf 'export %s=%s\n' "$v" "$val"
  done
  printf 'export TERM=xterm-256color\ncd %s && exec %s -m laneboard\n' "$REPO" "$PY"
} > "$script"
tmux -L "lbidle-$L" kill-server 2>/dev/null
tmux -L "lbidle-$L" new-session -d -s ui -x 200 -y 50 sh "$script"
sleep 3
PID=$(tmux -L "lbidle-$L" display-message -p -t ui '#{pane_pid}')
c() { awk '{print $14+$15+$16+$17}' "/proc/$PID/stat"; }
for _ in $(seq 1 30); do a=$(c); sleep 3; b=$(c); [ $((b - a)) -lt 6 ] && break; done
a=$(c); sleep 62; b=$(c)
echo "$L: idle over 62 s: $((b - a)) ticks = $(echo "scale=2; ($b - $a) / 62" | bc) % of one core"
tmux -L "lbidle-$L" send-keys -t ui q; sleep 2; tmux -L "lbidle-$L" kill-server 2>/dev/null
rm -f "$script"
