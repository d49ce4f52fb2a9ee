# What the bench/ round scripts (batch_invariance_ab.sh, event_thread_ab.sh, follow_plan.sh)
# share: their flag parsing, the checks of their flags and binaries, a temporary folder
# removed on exit, and one saturn-server at a time on a port of its own. Sourced, never run:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib_ab.sh"
# The functions exit the script (2: a bad flag or a missing binary, 1: a server that did not
# start) with a message on stderr.

# ab_parse_flags HELP_LINES "NAME..." "$@": each --NAME VALUE sets the variable NAME; -h or
# --help prints lines HELP_LINES (a sed range, e.g. 2,8) of the script and exits 0; any other
# argument is refused. With -- among the NAMEs, a -- ends the flags and what follows it goes
# to the array ab_rest.
ab_parse_flags() {
  local help="$1" names=" $2 "
  shift 2
  ab_rest=()
  while [[ $# -gt 0 ]]; do
    if [[ "$1" == -h || "$1" == --help ]]; then
      sed -n "${help}p" "$0"
      exit 0
    elif [[ "$1" == -- && "$names" == *" -- "* ]]; then
      shift
      ab_rest=("$@")
      return
    elif [[ "$1" =~ ^--([a-z_]+)$ && "$names" == *" ${BASH_REMATCH[1]} "* ]]; then
      printf -v "${1#--}" '%s' "$2"
      shift 2
    else
      echo "$(basename "$0"): unknown flag $1 (see --help)" >&2
      exit 2
    fi
  done
}

# ab_check_rounds: $rounds is a positive integer.
ab_check_rounds() {
  [[ "$rounds" =~ ^[1-9][0-9]*$ ]] ||
    { echo "--rounds must be a positive integer, got $rounds" >&2; exit 2; }
}

# ab_need_binaries BUILD_DIR BINARY...: each BINARY is built (else: build BUILD_DIR first).
ab_need_binaries() {
  local build="$1" b
  shift
  for b in "$@"; do
    [[ -x "$b" ]] || { echo "no $b: build first (cmake --build $build)" >&2; exit 2; }
  done
}

# ab_setup: $tmp, a temporary folder; on exit the server in $pid (if any) is stopped and $tmp
# removed. $port: a random port in [20000, 40000), the first server's.
ab_setup() {
  tmp=$(mktemp -d)
  pid=""
  trap ab_cleanup EXIT
  port=$((20000 + RANDOM % 20000))
}

ab_cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }

# ab_start_server LOG COMMAND...: runs COMMAND (a saturn-server listening on $port) in the
# background, its output in LOG, its process id in $pid, and waits up to 180 s for it to
# serve; exits 1 with the log's tail when it does not.
ab_start_server() {
  local log="$1"
  shift
  "$@" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 180); do grep -q "(SERVING)" "$log" && break; sleep 1; done
  grep -q "(SERVING)" "$log" || { tail -5 "$log" >&2; exit 1; }
}

# ab_stop_server: stops the server in $pid; the next one takes the next port.
ab_stop_server() {
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  port=$((port + 1))
}
