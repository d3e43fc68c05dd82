#!/bin/sh
# fake-agent.sh: a stand-in for srcip-agent used to test the lab harness and
# the demo before the real agent exists. It accepts the agent's flag contract
# and, on node1 only, hand-writes path P2 of docs/pipeline.md for the demo Service
# demo/web (NodePort 192.0.2.11:30080/30053, LB 203.0.113.100:80/53,
# externalIP 203.0.113.101:80/53) to the LOCAL endpoint echo-c 10.244.1.5:8080,
# keeping the client IP and answering from the VIP. Other nodes: idle.
# Flows carry cookie 0x5cfa..., zone 7. Not the product: no tunnels.
set -eu
for a in "$@"; do
  case "$a" in
    --node-name=*) NODE=${a#*=} ;;
    --ovs-rundir=*) export OVS_RUNDIR=${a#*=} ;;
    --ovsdb=*) DB=${a#*=} ;;
  esac
done
echo "fake-agent: node=$NODE rundir=$OVS_RUNDIR db=$DB args: $*"
trap 'echo "fake-agent: TERM, flows stay"; kill $! 2>/dev/null; exit 0' TERM INT
if [ "$NODE" != node1 ]; then
  while :; do sleep 1 & wait $! || true; done
fi

VSCTL="ovs-vsctl --db=$DB --timeout=10"
OF="ovs-ofctl -O OpenFlow15"
C=0x5cfa000000000001
NODEMAC=02:00:c0:00:02:0b
GWMAC=0a:58:0a:f4:01:01
POD=10.244.1.5
PODMAC=0a:58:0a:f4:01:05

$VSCTL --may-exist add-br br-int -- set bridge br-int datapath_type=netdev fail_mode=secure \
  protocols=OpenFlow10,OpenFlow13,OpenFlow15 \
  -- --may-exist add-port br-ex fk-ex-to-int -- set interface fk-ex-to-int type=patch options:peer=fk-int-to-ex \
  -- --may-exist add-port br-int fk-int-to-ex -- set interface fk-int-to-ex type=patch options:peer=fk-ex-to-int
PATCHEX=$($VSCTL get interface fk-ex-to-int ofport)
PATCHINT=$($VSCTL get interface fk-int-to-ex ofport)
UPLINK=$($VSCTL get interface eth0 ofport)
PODPORT=$($VSCTL --bare --columns=ofport find interface external_ids:iface-id=demo_echo-c)
echo "fake-agent: ofports patch-ex=$PATCHEX patch-int=$PATCHINT uplink=$UPLINK pod=$PODPORT"

{
  for vip in 192.0.2.11,30080,30053 203.0.113.100,80,53 203.0.113.101,80,53; do
    ip=${vip%%,*}; rest=${vip#*,}; tport=${rest%,*}; uport=${rest#*,}
    echo "cookie=$C,table=0,priority=200,in_port=$UPLINK,tcp,nw_dst=$ip,tp_dst=$tport,actions=ct(zone=7,nat,table=1)"
    echo "cookie=$C,table=0,priority=200,in_port=$UPLINK,udp,nw_dst=$ip,tp_dst=$uport,actions=ct(zone=7,nat,table=1)"
  done
  echo "cookie=$C,table=0,priority=200,in_port=$PATCHEX,ip,actions=ct(zone=7,nat,table=2)"
  echo "cookie=$C,table=0,priority=0,actions=NORMAL"
  # Already translated (established, or a retransmitted SYN: docs/lab-facts.md#pitfall-4).
  echo "cookie=$C,table=1,priority=110,ct_state=+trk+dnat,ip,actions=mod_dl_src:$GWMAC,mod_dl_dst:$PODMAC,output:$PATCHEX"
  for p in tcp udp; do
    echo "cookie=$C,table=1,priority=100,ct_state=+new+trk,$p,actions=ct(commit,zone=7,nat(dst=$POD:8080),exec(move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47]),table=3)"
  done
  # NATed headers are only visible after recirculation (table=3).
  echo "cookie=$C,table=3,priority=100,ip,actions=mod_dl_src:$GWMAC,mod_dl_dst:$PODMAC,output:$PATCHEX"
  echo "cookie=$C,table=1,priority=0,actions=drop"
  echo "cookie=$C,table=2,priority=100,ct_state=+trk+est+rpl,ip,actions=move:NXM_NX_CT_LABEL[0..47]->NXM_OF_ETH_DST[],mod_dl_src:$NODEMAC,output:$UPLINK"
  echo "cookie=$C,table=2,priority=0,actions=drop"
} | $OF --bundle add-flows br-ex -

{
  echo "cookie=$C,table=0,priority=100,in_port=$PATCHINT,ip,nw_dst=$POD,actions=output:$PODPORT"
  echo "cookie=$C,table=0,priority=100,in_port=$PODPORT,arp,arp_op=1,arp_tpa=10.244.1.1,actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],mod_dl_src:$GWMAC,load:0x2->NXM_OF_ARP_OP[],move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],set_field:$GWMAC->arp_sha,set_field:10.244.1.1->arp_spa,in_port"
  echo "cookie=$C,table=0,priority=100,in_port=$PODPORT,ip,nw_src=$POD,actions=output:$PATCHINT"
} | $OF --bundle add-flows br-int -
echo "fake-agent: flows installed"
while :; do sleep 1 & wait $! || true; done
