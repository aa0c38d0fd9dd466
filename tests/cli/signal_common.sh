# shellcheck shell=bash
# Sourced by the signal tests (after tests/script_common.sh): signal_mid_write, which
# sends a signal to a command while its temporary file exists.
shopt -s nullglob
sig_child=""  # the command signal_mid_write runs: never left behind (frozen) by a failing script
trap '[[ -z $sig_child ]] || kill -KILL "$sig_child" 2> /dev/null; rm -rf "$work"' EXIT
exec {nap_fd}<> <(:)  # a pipe nobody writes to: read -t on it pauses without a process
nap() { read -r -t 0.001 -u "$nap_fd" _ || true; }  # ~1 ms

# frozen PID: every thread of PID is stopped (SIGSTOP: state T in /proc/PID/task/*/stat).
frozen() {
  local line state threads=0 t
  for t in /proc/"$1"/task/*/stat; do
    read -r line < "$t" 2> /dev/null || return 1
    state=${line##*) }  # after "pid (comm) "
    [[ ${state%% *} == T ]] || return 1
    threads=$((threads + 1))
  done
  ((threads > 0))
}

# running PID: PID exists and has not ended (a zombie the shell has not reaped yet has).
running() {
  local line
  read -r line < /proc/"$1"/stat 2> /dev/null || return 1
  line=${line##*) }
  [[ ${line%% *} != [ZX] ]]
}

# signal_mid_write SIG PATTERN LOG CMD...: runs CMD in the background, output to LOG,
# with SIGHUP, SIGINT and SIGTERM at their default disposition (a non-interactive shell
# starts a background job with SIGINT ignored). Once a file matching PATTERN (its
# temporary) exists it freezes CMD (SIGSTOP, until every thread has stopped); if the
# temporary is still there it sends SIG and lets CMD go on (SIGCONT), so SIG arrives
# while the temporary exists; otherwise it lets CMD go on and keeps watching. Sets
# caught (the temporary's name, or "" when CMD ended before one was caught) and rc
# (CMD's exit status, 128 + N when signal N ended it).
signal_mid_write() {
  local sig=$1 pattern=$2 log=$3 pid found
  shift 3
  caught="" rc=""
  env --default-signal=HUP,INT,TERM "$@" > "$log" 2>&1 &
  pid=$!
  sig_child=$pid
  local deadline=$((SECONDS + 120))
  while running "$pid" && ((SECONDS < deadline)); do
    found=($pattern)
    if ((${#found[@]} > 0)); then
      kill -STOP "$pid" 2> /dev/null || break
      until frozen "$pid" || ! running "$pid" || ((SECONDS >= deadline)); do nap; done
      found=($pattern)
      if ((${#found[@]} > 0)) && frozen "$pid"; then
        caught=${found[0]}
        kill -"$sig" "$pid"
        kill -CONT "$pid" 2> /dev/null || true
        break
      fi
      kill -CONT "$pid" 2> /dev/null || true
    fi
    nap
  done
  if ((SECONDS >= deadline)) && running "$pid"; then
    kill -KILL "$pid" 2> /dev/null || true
    echo "signal_mid_write: $* still running after 120 s, killed"
  fi
  set +e
  wait "$pid"
  rc=$?
  set -e
  sig_child=""
}

# no_temporaries PATTERN WHAT: fails naming any file matching PATTERN (left temporaries).
no_temporaries() {
  local left=($1)
  ((${#left[@]} == 0)) || fail "$2: temporary file(s) left: ${left[*]}"
}
