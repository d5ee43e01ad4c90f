# Sourced by the guest's /init (pair 0) and rdma/paired-bw.sh (pair 1):
# rxe_pair I wires pair I, veth(2I) 10.(77+I).0.1 <-> veth(2I+1)
# 10.(77+I).0.2, with rxe(2I) on the first and rxe(2I+1) on the second.
# Both addresses are local, so by default Linux routes traffic between them
# through lo, and rxe drops what goes via lo. Policy routing forces the
# first address -> the second out of the first veth and the reverse out of
# the second, and still delivers locally what arrives on a veth. Rules, in
# order of preference:
#  10: packets arriving on a veth: local delivery first.
#  20: locally originated traffic between the two addresses: out of the
#      veth of its source (rxe's own route lookup hits these).
#  25: any other traffic with one of them as explicit source: as usual.
#  30: unbound sockets: to the second address leaves the first veth, and
#      the reverse, so a client that does not bind still crosses devices
#      (rdma_cm would otherwise loop back inside a single rxe device).
# The caller moves the default local rule (pref 0) behind these, once.
# (A separate netns per end does not work on 6.1: rxe's UDP socket lives in
# the initial namespace only.)
# Pair I's end E (0: the client's, 1: the server's): its rxe device and address.
rxe_dev() { echo "rxe$((2 * $1 + $2))"; }
rxe_addr() { echo "10.$((77 + $1)).0.$(($2 + 1))"; }
rxe_pair() {
  local i=$1
  local v0=veth$((2 * i)) v1=veth$((2 * i + 1)) a0 a1
  a0=$(rxe_addr "$i" 0) a1=$(rxe_addr "$i" 1)
  local t0=$((100 + 2 * i)) t1=$((101 + 2 * i)) mac=02:$((77 + i)):00:00:00
  # One `ip -batch`: fewer process starts, which cost under TCG.
  ip -batch - <<EOP || return 1
link add $v0 address $mac:01 type veth peer name $v1 address $mac:02
addr add $a0/24 dev $v0
addr add $a1/24 dev $v1
link set $v0 up
link set $v1 up
rule add pref 10 iif $v0 lookup local
rule add pref 10 iif $v1 lookup local
rule add pref 20 from $a0 to $a1 lookup $t0
rule add pref 20 from $a1 to $a0 lookup $t1
rule add pref 25 from $a0 lookup local
rule add pref 25 from $a1 lookup local
rule add pref 30 to $a1 lookup $t0
rule add pref 30 to $a0 lookup $t1
route add $a1 dev $v0 src $a0 table $t0
route add $a0 dev $v1 src $a1 table $t1
EOP
  rdma link add "$(rxe_dev "$i" 0)" type rxe netdev $v0 && rdma link add "$(rxe_dev "$i" 1)" type rxe netdev $v1
}
