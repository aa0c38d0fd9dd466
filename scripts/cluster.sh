#!/usr/bin/env bash
# A cluster of hosts on this machine: runs COMMAND under mpirun across N hosts made of
# network namespaces, each with its own hostname, IP stack and link to a switch, then
# tears everything down, also after a failure or Ctrl-C.
#
#   scripts/cluster.sh [--hosts N] [--ranks-per-host R] [--rate RATE] [--name NAME]
#                      [--bind HOST:SRC:DST]... [--mpirun-arg ARG]... -- COMMAND ARGS...
#
#   --hosts N            hosts node1 .. nodeN (2; at most 4)
#   --ranks-per-host R   MPI ranks per host (1); ranks are numbered host by host
#   --rate RATE          every host's link limited to RATE each way with tc's token
#                        bucket (tbf), e.g. 1gbit or 200mbit (unlimited)
#   --name NAME          the namespaces are NAME-node1 .. NAME-nodeN and NAME-switch
#                        (lct<pid>), so that a test can find one host's processes
#   --bind HOST:SRC:DST  on host HOST only, SRC is bind-mounted over DST: a host whose
#                        file system differs (another binary, another config, a folder
#                        it cannot see)
#   --mpirun-arg ARG     one more mpirun argument (repeatable)
#
# The hosts: namespaces NAME-nodeI with a veth pair to a bridge in NAME-switch, address
# 10.213.0.I/24 (these addresses exist only inside the namespaces made here), hostname
# nodeI (a UTS namespace) and an /etc/hosts naming every host (a mount namespace). mpirun
# runs on node1; OpenMPI starts its daemon on every other host through an agent that
# enters that host's namespaces instead of ssh (plm_rsh_agent), and the ranks talk over
# TCP between hosts (shared memory only within a host): btl tcp,vader,self, with both
# the daemons' and the ranks' TCP restricted to the cluster's subnet. The file system is
# the machine's (a shared file system, as on a real cluster) unless --bind changes it.
# Two TCP connections per pair of ranks (btl_tcp_links 2): over one, a pair that sends
# both ways at once got half the link each way (an 8 MiB MPI_Sendrecv at 61 MB/s on a
# 1 Gbit/s link, 12 MB/s at 200 Mbit/s); over two, 119 and 23.6 MB/s, the rate less
# TCP's overhead (docs/clusters.md).
#
# Exit code: COMMAND's (mpirun's); 1 with one line when namespaces cannot be made here
# (not root, no ip, no network namespaces): tests skip on that line.
set -uo pipefail

hosts=2 ranks_per_host=1 rate="" name="lct$$"
binds=() mpirun_args=()
die() { echo "cluster.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) hosts=${2:-}; shift 2 || die "--hosts needs a value" ;;
    --ranks-per-host) ranks_per_host=${2:-}; shift 2 || die "--ranks-per-host needs a value" ;;
    --rate) rate=${2:-}; shift 2 || die "--rate needs a value" ;;
    --name) name=${2:-}; shift 2 || die "--name needs a value" ;;
    --bind) binds+=("${2:-}"); shift 2 || die "--bind needs HOST:SRC:DST" ;;
    --mpirun-arg) mpirun_args+=("${2:-}"); shift 2 || die "--mpirun-arg needs a value" ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ $# -gt 0 ]] || die "no command: scripts/cluster.sh [options] -- COMMAND ARGS..."
[[ $hosts =~ ^[1-4]$ ]] || die "--hosts '$hosts': want 1 to 4"
[[ $ranks_per_host =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-host '$ranks_per_host': want a positive integer"
[[ -z $rate || $rate =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)$ ]] ||
  die "--rate '$rate': want a tc rate such as 1gbit or 200mbit"
[[ $name =~ ^[A-Za-z][A-Za-z0-9]{0,9}$ ]] || die "--name '$name': want a letter and at most 9 letters or digits"
for b in "${binds[@]}"; do
  IFS=: read -r bh bs bd <<< "$b"
  [[ $bh =~ ^node[1-4]$ && ${bh#node} -le $hosts && -n $bs && -n $bd ]] ||
    die "--bind '$b': want HOST:SRC:DST, HOST one of node1..node$hosts"
  [[ -e $bs ]] || die "--bind '$b': $bs does not exist"
  [[ -e $bd ]] || die "--bind '$b': $bd does not exist"
done

# what the cluster needs, refused in one line
[[ $EUID -eq 0 ]] || die "cannot make network namespaces here: not root"
for tool in ip unshare mount mpirun; do
  command -v "$tool" > /dev/null || die "cannot make network namespaces here: no '$tool'"
done
[[ -z $rate ]] || command -v tc > /dev/null || die "cannot limit the links here: no 'tc'"

remove_namespaces() {  # NS...: every process left in a host, then the host
  local ns pids
  for ns in "$@"; do
    pids=$(ip netns pids "$ns" 2> /dev/null)
    [[ -n $pids ]] && kill -KILL $pids 2> /dev/null
  done
  for ns in "$@"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      [[ -z $(ip netns pids "$ns" 2> /dev/null) ]] && break
      sleep 0.1
    done
    ip netns del "$ns" 2> /dev/null
  done
}
# What an earlier run left when it was killed outright (SIGKILL, a crash): its state
# folder records its pid and the namespaces it made; a folder whose run is gone is
# removed with its namespaces and processes.
for old in "${TMPDIR:-/tmp}"/lct-cluster.*/; do
  [[ -f $old/pid ]] || continue
  old_pid=$(cat "$old/pid" 2> /dev/null)
  [[ $old_pid =~ ^[0-9]+$ ]] && ! kill -0 "$old_pid" 2> /dev/null || continue
  mapfile -t left < <(cat "$old/namespaces" 2> /dev/null)
  remove_namespaces "${left[@]}"
  rm -rf "$old"
  echo "cluster.sh: removed what an earlier run (pid $old_pid) left: ${left[*]:-no namespaces}, ${old%/}" >&2
done

state=$(mktemp -d "${TMPDIR:-/tmp}/lct-cluster.XXXXXX")
echo $$ > "$state/pid"
made=()  # namespaces made (also in $state/namespaces), deleted at exit
teardown() {
  # a second Ctrl-C (or any signal) while tearing down is ignored: teardown finishes
  trap '' INT TERM HUP
  trap - EXIT
  [[ -n ${job:-} ]] && kill -TERM "$job" 2> /dev/null
  mapfile -t made < <(cat "$state/namespaces" 2> /dev/null)  # its record: also one not yet in made
  remove_namespaces "${made[@]}"
  rm -rf "$state"
}
trap 'teardown; exit $rc' EXIT
trap 'rc=130; exit 130' INT
trap 'rc=143; exit 143' TERM HUP
rc=1

netns() {
  echo "$1" >> "$state/namespaces"  # recorded first: a kill right after leaves no unrecorded namespace
  ip netns add "$1" 2> "$state/err" || die "cannot make network namespaces here: $(head -1 "$state/err")"
  made+=("$1")
}
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
shape() {  # namespace, interface: egress limited to the rate (a link limited each way
  # is both of its ends limited); a bucket of 2 ms at the rate, at least 64 KiB, so
  # that segmentation offload's large packets pass, and a queue of 100 ms
  [[ -n $rate ]] || return 0
  in_ns "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 100ms 2> "$state/err" ||
    die "tc tbf on $2: $(head -1 "$state/err")"
}
if [[ -n $rate ]]; then
  bits=$(awk -v r="$rate" 'BEGIN { n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u);
    m = substr(u, 1, 1); f = (m == "k") ? 1e3 : (m == "m") ? 1e6 : (m == "g") ? 1e9 : 1;
    if (u ~ /bps$/) f *= 8; printf "%.0f", n * f }')
  burst=$(( bits / 8 / 500 > 65536 ? bits / 8 / 500 : 65536 ))
fi

sw="$name-switch"
netns "$sw"
in_ns "$sw" ip link set lo up
in_ns "$sw" ip link add br0 type bridge || die "cannot make a bridge here"
in_ns "$sw" ip link set br0 up
: > "$state/hosts"
: > "$state/hostfile"
echo "127.0.0.1 localhost" >> "$state/hosts"
for i in $(seq 1 "$hosts"); do echo "10.213.0.$i node$i" >> "$state/hosts"; done
for i in $(seq 1 "$hosts"); do
  ns="$name-node$i"
  netns "$ns"
  # the pair is made in the switch and one end moved into the host, where it is eth0
  in_ns "$sw" ip link add "p$i" type veth peer name "h$i" || die "cannot make a veth pair here"
  in_ns "$sw" ip link set "h$i" netns "$ns"
  in_ns "$sw" ip link set "p$i" master br0 up
  in_ns "$ns" ip link set "h$i" name eth0
  in_ns "$ns" ip addr add "10.213.0.$i/24" dev eth0
  in_ns "$ns" ip link set eth0 up
  in_ns "$ns" ip link set lo up
  shape "$ns" eth0
  shape "$sw" "p$i"
  echo "node$i slots=$ranks_per_host" >> "$state/hostfile"
done

# enter HOST COMMAND...: runs COMMAND on HOST (its network, hostname, /etc/hosts and
# --bind mounts); the agent is what OpenMPI calls in place of ssh
{
  echo '#!/bin/sh'
  echo 'host=$1; shift'
  echo "ip netns exec \"$name-\$host\" unshare --uts --mount --propagation private sh -c '"
  echo '  host=$1; shift'
  echo '  hostname "$host" && mount --bind '"$state"'/hosts /etc/hosts || exit 1'
  for b in "${binds[@]}"; do
    IFS=: read -r bh bs bd <<< "$b"
    printf '  if [ "$host" = %q ]; then mount --bind %q %q || exit 1; fi\n' "$bh" "$(realpath "$bs")" "$(realpath "$bd")"
  done
  echo '  exec "$@"'
  echo "' sh \"\$host\" \"\$@\""
} > "$state/enter"
cat > "$state/agent" << EOF
#!/bin/sh
# OpenMPI's launcher calls: agent [options] HOST COMMAND-WORDS (a remote shell's command).
# It stays outside the host (on mpirun's) and notes a host whose daemon was killed.
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
sh "$state/enter" "\$host" sh -c "\$*"
status=\$?
[ \$status -gt 128 ] && echo "\$host \$status" >> "$state/lost"
exit \$status
EOF
chmod +x "$state/enter" "$state/agent"
mkdir "$state/tmp"  # OpenMPI's session folders: removed with the rest, even after a kill

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
net="10.213.0.0/24"
links=$([[ -n $rate ]] && echo "links limited to $rate each way" || echo "links unlimited")
echo "cluster: $hosts hosts x $ranks_per_host ranks (node1..node$hosts, $links, namespaces $name-*)" >&2
# mpirun's output passes through unchanged and is kept, to name a lost host afterwards
sh "$state/enter" node1 mpirun --hostfile "$state/hostfile" -np $(( hosts * ranks_per_host )) \
  --bind-to none --oversubscribe --mca plm_rsh_agent "$state/agent" --mca orte_tmpdir_base "$state/tmp" \
  --mca oob_tcp_if_include "$net" --mca btl tcp,vader,self --mca btl_tcp_if_include "$net" --mca btl_tcp_links 2 \
  "${mpirun_args[@]}" "$@" > >(tee "$state/out") 2> >(tee "$state/err" >&2) &
job=$!
wait "$job"
rc=$?
job=""
sleep 0.2  # the tees' last lines
# a host that died: the agent saw its daemon killed, or mpirun names it ("Remote daemon:
# ... on node nodeI"; when the daemon's launch fails instead it does not); its ranks are
# the I-th block of R (the hostfile's slots, filled host by host); lct logs each
# checkpoint as "checkpoint: PATH"
lost=$(cut -d' ' -f1 "$state/lost" 2> /dev/null | head -1)
[[ -n $lost ]] || lost=$(sed -n 's/.*Remote daemon: .* on node \(node[0-9]\).*/\1/p' "$state/err" | head -1)
if [[ $rc -ne 0 && -n $lost ]]; then
  i=${lost#node}
  first=$(( (i - 1) * ranks_per_host )) last=$(( i * ranks_per_host - 1 ))
  ranks=$([[ $first -eq $last ]] && echo "rank $first" || echo "ranks $first-$last")
  ckpt=$(sed -n 's/^checkpoint: \(.*\)/\1/p' "$state/out" | tail -1)
  echo "cluster.sh: lost host $lost ($ranks): mpirun ended the job on every host (exit $rc);" \
    "last checkpoint written: ${ckpt:-none}" >&2
fi
exit $rc
