#!/usr/bin/env bash
# plan_netns.sh: cohort plan's predictions against runs between hosts, the
# hosts being network namespaces on this machine, each on its own link to
# a router namespace, their links rate-limited with tc and delayed.
#
#   sudo bench/plan_netns.sh
#
# Topology: HOSTS hosts (2 or 3), host i in its own namespace with
# NET.i.2/24 on eth0, a veth to the router namespace (NET.i.1); each host
# routes NET.0.0/16 via the router and has no default route; nothing is
# added to the initial namespace.
#
# Delay: DELAY is added each way between two hosts. Where the kernel has
# netem, netem on each host's outgoing link adds it. Else (no
# CONFIG_NET_SCH_NETEM) the router redirects the TCP connections between
# hosts (nft redirect in its prerouting hook) to bench/netdelay, a relay
# that writes every chunk it reads DELAY later into its own connection to
# the original destination, so that every connection (cohort's store and
# its TCP transport alike) sees the delay each way. The relay copies every
# byte through user space on the machine's own cores: for each run the
# script prints its CPU time (/proc/PID/stat) beside the run's wall time,
#        plan_netns: relay CPU C s over W s of NAME (P% of one core)
# for the reader to judge what it took from the ranks. Without nft, or
# where the relay cannot be set up, the links carry no added delay and the
# script says so.
#
# For each rate in RATES it shapes every host's outgoing link (tc tbf),
# then
#   1. fits the inter-node fabric: cohort bench allreduce with one rank on
#      each host and broadcast (one message: the fit's p2p) between hosts
#      0 and 1, workers started by cohort run on each host, then cohort
#      plan fit --inter-results; the fit's α holds the delay (about DELAY
#      more per message step than without it);
#   2. predicts GPT-mini's tokens/s with that fabric and this machine's
#      device (profiled once, first: two traced pipeline runs read by
#      cohort plan profile, as cohort plan validate does) on HOSTS nodes
#      of one rank: data parallelism over the hosts (dp HOSTS, 32
#      sequences per rank, ddp's buckets, cohort bench train --shard none)
#      and a pipeline of HOSTS stages across them (1f1b, 32 sequences in 8
#      microbatches, cohort bench pipeline);
#   3. runs both across the hosts over TCP and prints
#        plan_netns: rate R dpN|ppN predicted P measured M tokens/s error E%
# and at the end the worst error (the aim is 15 %). With "none" among the
# RATES (links unshaped: about 15 Gbit/s between namespaces here, so
# 25gbit shapes nothing either), it also prints for each rate the
# slowdown the link causes, predicted against measured
#        plan_netns: rate R dpN|ppN over none: predicted ×P measured ×M
# which checks the fabric's fit apart from the compute side of the model
# (the device profile), which load from other processes disturbs most.
#
# All ranks share the machine's cores, as they share them in cohort plan
# validate: give the runs a quiet machine. With more hosts than cores the
# ranks are oversubscribed, which cohort plan is not told (it has no flag
# for the cores, and plan.Cluster.Cores counts one node's cores, not cores
# that nodes share): those lines end in "oversubscribed".
#
# Safety: everything runs inside namespaces this script creates and is
# removed on exit, also on failure or interrupt. Needs root and permission
# to create namespaces; otherwise it prints why and exits 0 (a skip).
#
# Environment (defaults in brackets):
#   RATES   [none 100mbit 1gbit 10gbit 25gbit]  tc rates ("none": unshaped; 100mbit makes
#                                    the link, not the cores, GPT-mini's limit)
#   HOSTS   [2]                      hosts (namespaces) of one rank each: 2 or 3
#   DELAY   [2ms]                    one-way delay between hosts (0: none)
#   DELAYER [auto]                   netem, relay, or auto (netem where the kernel has it)
#   STEPS   [20]                     timed steps of each training run
#   ROUNDS  [3]                      measurements of each run (median reported)
#   SIZES   [4KiB,64KiB,1MiB,4MiB,16MiB]  sizes of the fit
#   BUDGET  [0.5s]                   timed loop per size of the fit
#   STAT    [median]                 which time of each size to fit (median or min)
#   DEVICE  []                       a device file (cohort plan profile); default: profile here
#   KEEP    []                       a directory to keep the fits, results and logs in
set -euo pipefail

RATES=${RATES:-none 100mbit 1gbit 10gbit 25gbit}
HOSTS=${HOSTS:-2}
DELAY=${DELAY:-2ms}
DELAYER=${DELAYER:-auto}
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-4KiB,64KiB,1MiB,4MiB,16MiB}
BUDGET=${BUDGET:-0.5s}
STAT=${STAT:-median}
DEVICE=${DEVICE:-}
KEEP=${KEEP:-}

case "$HOSTS" in 2 | 3) ;; *) echo "plan_netns: HOSTS=$HOSTS: want 2 or 3" >&2; exit 2 ;; esac
case "$DELAYER" in auto | netem | relay) ;; *) echo "plan_netns: DELAYER=$DELAYER: want auto, netem or relay" >&2; exit 2 ;; esac

skip() { echo "plan_netns: skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "running as uid $(id -u), not root"
for tool in ip tc go; do command -v $tool >/dev/null || skip "$tool not found"; done

P="cpn$$-"                      # namespace prefix: this run's own
NET="10.$(( ($$ % 200) + 20 ))" # a /16 used only inside the namespaces
PORT=29571
RELAYPORT=15001
WORK=$(mktemp -d)
PIDS=()
RELAY=""

cleanup() {
  local pid ns
  for pid in "${PIDS[@]}" $RELAY; do kill "$pid" 2>/dev/null || true; done
  for ns in $(ip netns list | awk '{print $1}' | grep "^$P" || true); do ip netns del "$ns" || true; done
  if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp -r "$WORK"/. "$KEEP"/; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "${P}probe" 2>/dev/null || skip "ip netns add is not permitted here"
ip netns del "${P}probe"

cd "$(dirname "$0")/.."
echo "plan_netns: building cohort"
go build -o "$WORK/cohort" ./cmd/cohort
COHORT="$WORK/cohort"

# The router (namespace $R) and HOSTS hosts (${P}hI at NET.I.2), each on
# its own veth to the router (NET.I.1).
R="${P}r"
ip netns add "$R"
ip -n "$R" link set lo up
ip netns exec "$R" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
NS=()
ADDRS=()
for i in $(seq 0 $((HOSTS - 1))); do
  ns="${P}h$i"
  ip netns add "$ns"
  ip link add eth0 netns "$ns" type veth peer name "r$i" netns "$R"
  ip -n "$ns" addr add "$NET.$i.2/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip -n "$R" addr add "$NET.$i.1/24" dev "r$i"
  ip -n "$R" link set "r$i" up
  ip -n "$ns" route add "$NET.0.0/16" via "$NET.$i.1"
  if [ -n "$(ip -n "$ns" route show default)" ]; then echo "plan_netns: $ns has a default route" >&2; exit 1; fi
  NS+=("$ns")
  ADDRS+=("$NET.$i.2")
done
MASTER="${ADDRS[0]}"
# the secret every node's cohort run must share
COHORT_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export COHORT_TOKEN

# startrelay: the TCP connections between hosts redirected to
# bench/netdelay in the router (its pid in RELAY); on failure it says why
# in WHY and undoes what it set up.
WHY=""
startrelay() {
  local set i
  command -v nft >/dev/null || { WHY="nft not found"; return 1; }
  go build -o "$WORK/netdelay" ./bench/netdelay || { WHY="go build ./bench/netdelay failed"; return 1; }
  set=$(IFS=,; echo "${ADDRS[*]}")
  if ! ip netns exec "$R" nft -f - <<EOF
table ip netdelay {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    ip saddr { $set } ip daddr { $set } meta l4proto tcp redirect to :$RELAYPORT
  }
}
EOF
  then WHY="nft redirect failed"; return 1; fi
  ip netns exec "$R" "$WORK/netdelay" --listen ":$RELAYPORT" --delay "$DELAY" -v 2> "$WORK/netdelay.log" &
  RELAY=$!
  for i in $(seq 100); do # up to 10 s for it to listen
    grep -q "listening" "$WORK/netdelay.log" 2>/dev/null && return 0
    kill -0 "$RELAY" 2>/dev/null || break
    sleep 0.1
  done
  WHY="the relay did not start: $(cat "$WORK/netdelay.log")"
  kill "$RELAY" 2>/dev/null || true
  RELAY=""
  ip netns exec "$R" nft delete table ip netdelay || true
  return 1
}

MODE=none # how the delay is added: netem, relay or none
case "$DELAY" in
  0 | 0ms | none | "") echo "plan_netns: no added delay (DELAY=$DELAY)" ;;
  *)
    if [ "$DELAYER" != relay ] && ip netns exec "${NS[0]}" tc qdisc add dev eth0 root netem delay "$DELAY" 2>/dev/null; then
      ip netns exec "${NS[0]}" tc qdisc del dev eth0 root
      MODE=netem
      echo "plan_netns: delay $DELAY each way: netem on each host's link"
    elif [ "$DELAYER" = netem ]; then
      echo "plan_netns: no added delay: this kernel has no netem (tc qdisc netem fails), and DELAYER=netem"
    elif startrelay; then
      MODE=relay
      echo "plan_netns: delay $DELAY each way: bench/netdelay in the router (pid $RELAY; $([ "$DELAYER" = relay ] && echo 'DELAYER=relay' || echo 'this kernel has no netem'))"
    else
      echo "plan_netns: no added delay: this kernel has no netem (tc qdisc netem fails) and the relay could not be set up: $WHY"
    fi
    ;;
esac

# shape RATE: tbf on every host's eth0 (each direction of a path between
# two hosts is shaped once, at its sender), with netem's delay under it
# where the delay is netem's.
shape() {
  local rate=$1 ns burst
  for ns in "${NS[@]}"; do
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    if [ "$rate" = none ]; then
      [ "$MODE" = netem ] && ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$DELAY"
      continue
    fi
    # a burst of 1 ms at the rate, at least 64 KiB (one GSO packet)
    burst=$(awk -v r="$rate" 'BEGIN { n = r + 0; if (r ~ /gbit/) n *= 1e9; else if (r ~ /mbit/) n *= 1e6; b = int(n / 8 / 1000); if (b < 65536) b = 65536; print b }')
    if [ "$MODE" = netem ]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "$DELAY"
      ip netns exec "$ns" tc qdisc add dev eth0 parent 1: handle 2: tbf rate "$rate" burst "$burst" latency 50ms
    else
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
    fi
  done
}

# across N NAME ARGS...: one worker on each of the first N hosts through
# cohort run; rank 0's output goes to $WORK/NAME.out. Fails if any node
# fails. With the relay, prints its CPU time over the run.
across() {
  local n=$1 name=$2; shift 2
  local pids=() i rc=0 t0 c0
  t0=$(date +%s.%N)
  [ -n "$RELAY" ] && c0=$(awk '{ print $14 + $15 }' "/proc/$RELAY/stat")
  for i in $(seq 0 $((n - 1))); do
    ip netns exec "${NS[$i]}" "$COHORT" run --nnodes "$n" --nproc-per-node 1 --node-rank "$i" \
      --master-addr "$MASTER" --master-port "$PORT" --join-timeout 60s --grace-period 2s \
      -- "$COHORT" "$@" > "$WORK/$name.node$i" 2>&1 &
    pids+=($!)
    PIDS+=($!)
  done
  for i in $(seq 0 $((n - 1))); do wait "${pids[$i]}" || rc=$?; done
  PORT=$((PORT + 1))
  if [ -n "$RELAY" ]; then
    awk -v c0="$c0" -v c1="$(awk '{ print $14 + $15 }' "/proc/$RELAY/stat")" -v tick="$(getconf CLK_TCK)" \
      -v t0="$t0" -v t1="$(date +%s.%N)" -v name="$name" \
      'BEGIN { c = (c1 - c0) / tick; w = t1 - t0; printf "plan_netns: relay CPU %.2f s over %.2f s of %s (%.0f%% of one core)\n", c, w, name, 100 * c / w }'
  fi
  if [ $rc != 0 ]; then
    echo "plan_netns: $name failed ($rc):" >&2
    for i in $(seq 0 $((n - 1))); do tail -n 20 "$WORK/$name.node$i" >&2; done
    return $rc
  fi
  cp "$WORK/$name.node0" "$WORK/$name.out"
}

# The device: this machine's compute, profiled from traced pipeline runs
# on one host (shared memory), as cohort plan validate does.
if [ -z "$DEVICE" ]; then
  echo "plan_netns: profiling this machine (uptime: $(uptime))"
  # the 8-microbatch run last: its hand-off and side-by-side factor are the
  # ones kept (the validated pipeline's messages, as cohort plan validate keeps)
  for run in "64 2 32" "32 8 4"; do
    set -- $run
    "$COHORT" bench pipeline --stages 2 --schedule 1f1b --batch "$1" --microbatches "$2" --steps "$STEPS" \
      --trace "$WORK/trace$1" > "$WORK/profile$1.log" 2>&1
    if [ -f "$WORK/device.json" ]; then dev=(--device "$WORK/device.json"); else dev=(); fi
    "$COHORT" plan profile --microbatch "$3" "${dev[@]}" --name this-machine -o "$WORK/device.json.new" "$WORK/trace$1"
    mv "$WORK/device.json.new" "$WORK/device.json"
  done
  DEVICE="$WORK/device.json"
fi

model() { # model GLOBAL_BATCH: GPT-mini (models.GPTMini) as a model file
  printf '{"name": "gpt-mini", "layers": 4, "d_model": 128, "heads": 4, "seq": 64, "vocab": 256, "global_batch": %d, "precision": "fp32"}\n' "$1"
}
DP="dp$HOSTS"
PP="pp$HOSTS"
model $((32 * HOSTS)) > "$WORK/gpt-$DP.json"
model 32 > "$WORK/gpt-$PP.json"
NCPU=$(nproc)
OVER=""
[ "$HOSTS" -gt "$NCPU" ] && OVER=" oversubscribed ($HOSTS ranks on $NCPU cores)"

# predict LAYOUT-PREFIX MODEL FABRIC: the planner's tokens/s for one layout on HOSTS nodes of 1 rank.
predict() {
  "$COHORT" plan --model-config "$2" --nodes "$HOSTS" --procs-per-node 1 --device "$DEVICE" --fabric "$3" |
    awk -v want="$1" '!done && index($0, want) == 1 { for (i = 1; i < NF; i++) if ($i == "tokens/s") { print $(i + 1); done = 1 } }'
}

worst=0
declare -A PRED MEAS
report() { # report RATE WHAT PREDICTED MEASURED
  local err
  PRED[$1/$2]=$3
  MEAS[$1/$2]=$4
  err=$(awk -v p="$3" -v m="$4" 'BEGIN { printf "%+.1f", 100 * (p - m) / m }')
  echo "plan_netns: rate $1 $2 predicted $3 measured $4 tokens/s (median of $ROUNDS) error $err%$OVER"
  worst=$(awk -v w="$worst" -v e="$err" 'BEGIN { a = e < 0 ? -e : e; b = w < 0 ? -w : w; print (a > b ? e : w) }')
}

# Fit and predict once per rate, then measure in ROUNDS rounds, each
# over every rate (in reverse order every other round), so that load
# from other processes falls on all rates alike; report the median.
declare -A PDP PPP RUNS
for rate in $RATES; do
  shape "$rate"
  echo "plan_netns: rate $rate: fitting the link (uptime: $(uptime))"
  : > "$WORK/fit-$rate.results"
  across "$HOSTS" "fit-$rate-allreduce" bench allreduce --worker --world "$HOSTS" --transport tcp --sizes "$SIZES" --budget "$BUDGET" --timeout 5m
  cat "$WORK/fit-$rate-allreduce.out" >> "$WORK/fit-$rate.results"
  # cohort plan fit prices a broadcast on 2 ranks only (one message)
  across 2 "fit-$rate-broadcast" bench broadcast --worker --world 2 --transport tcp --sizes "$SIZES" --budget "$BUDGET" --timeout 5m
  cat "$WORK/fit-$rate-broadcast.out" >> "$WORK/fit-$rate.results"
  "$COHORT" plan fit --intra "" --inter tcp --inter-results "$WORK/fit-$rate.results" --stat "$STAT" \
    --base local --name "netns-$rate" -o "$WORK/fabric-$rate.json" 2>&1 | sed "s/^/plan_netns: rate $rate fit: /"
  PDP[$rate]=$(predict "plan: dp $HOSTS pp 1 tp 1 shard none microbatches 1 " "$WORK/gpt-$DP.json" "$WORK/fabric-$rate.json")
  PPP[$rate]=$(predict "plan: dp 1 pp $HOSTS tp 1 shard none microbatches 8 schedule 1f1b " "$WORK/gpt-$PP.json" "$WORK/fabric-$rate.json")
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
order=$RATES
for round in $(seq 1 "$ROUNDS"); do
  for rate in $order; do
    shape "$rate"
    across "$HOSTS" "$DP-$rate-$round" bench train --worker --result "$WORK/$DP-$rate-$round.json" --model gpt --world "$HOSTS" --shard none \
      --transport tcp --steps "$STEPS"
    # tokens/s = samples (64 tokens each) / the timed steps' wall time (ns)
    m=$(sed 's/.*"Shard":{//' "$WORK/$DP-$rate-$round.json" |
      awk -F'[,:}]' '{ for (i = 1; i < NF; i++) { if ($i == "\"Wall\"") w = $(i + 1); if ($i == "\"Samples\"") s = $(i + 1) } } END { printf "%.0f", s * 64 / (w / 1e9) }')
    RUNS[$rate/$DP]+=" $m"
    across "$HOSTS" "$PP-$rate-$round" bench pipeline --worker --result "$WORK/$PP-$rate-$round.json" --stages "$HOSTS" --schedule 1f1b --virtual 1 \
      --microbatches 8 --batch 32 --steps "$STEPS" --transport tcp
    m=$(awk -F'"tokens_per_s":' '{ split($2, a, /[,}]/); printf "%.0f", a[1] }' "$WORK/$PP-$rate-$round.json")
    RUNS[$rate/$PP]+=" $m"
    echo "plan_netns: round $round rate $rate measured $DP ${RUNS[$rate/$DP]##* } $PP $m tokens/s (uptime:$(uptime | sed 's/.*load average//'))"
  done
  order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
done
for rate in $RATES; do
  report "$rate" "$DP" "${PDP[$rate]}" "$(echo "${RUNS[$rate/$DP]}" | median)"
  report "$rate" "$PP" "${PPP[$rate]}" "$(echo "${RUNS[$rate/$PP]}" | median)"
done
shape none
if [ -n "${MEAS[none/$DP]:-}" ]; then
  for rate in $RATES; do
    [ "$rate" = none ] && continue
    for what in "$DP" "$PP"; do
      awk -v r="$rate" -v w="$what" -v p0="${PRED[none/$what]}" -v p="${PRED[$rate/$what]}" -v m0="${MEAS[none/$what]}" -v m="${MEAS[$rate/$what]}" \
        'BEGIN { printf "plan_netns: rate %s %s over none: predicted ×%.3f measured ×%.3f\n", r, w, p / p0, m / m0 }'
    done
  done
fi
case "$MODE" in
  netem) how=", links delayed $DELAY each way by netem" ;;
  relay) how=", links delayed $DELAY each way by bench/netdelay (its CPU time above)" ;;
  *) how=", links without added delay" ;;
esac
echo "plan_netns: worst tokens/s error $worst% (aim 15%)$how$OVER"
