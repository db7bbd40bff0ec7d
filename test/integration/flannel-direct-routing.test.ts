// DirectRouting (src/flannel/peers.ts) on a real kernel: two "nodes"
// (namespaces) on one underlay subnet, each with its VTEP and a pod address.
// Over VXLAN first, then with DirectRouting the peer's subnet is routed via
// its public address (no neighbour, no FDB entry) and a ping still crosses;
// switching back restores VXLAN and removes the direct route.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Prefix } from '../../src/net/ip';
import { applyPlan, planPeers, readActual, type Peer } from '../../src/flannel/backend/vxlan/peers';
import { ensureVtep } from '../../src/flannel/backend/vxlan/vtep';
import { makeNetns, sh } from './helpers';

const NETWORK = Prefix.parse('10.88.0.0/16')!;
const UNDERLAY = Prefix.parse('192.0.2.0/24')!;
const nodes = [
  { name: 'cnits-dr-a', ul: '192.0.2.1', subnet: '10.88.1.0/24', pod: '10.88.1.1', mac: '0a:58:00:00:01:01' },
  { name: 'cnits-dr-b', ul: '192.0.2.2', subnet: '10.88.2.0/24', pod: '10.88.2.1', mac: '0a:58:00:00:02:01' },
];

describe('DirectRouting between two nodes on one underlay subnet', () => {
  const ns = nodes.map((n) => makeNetns(n.name));
  const inNs = (i: number, argv: string[]) => sh(['nsenter', `--net=${ns[i].path}`, '--', ...argv]);
  const peerOf = (i: number): Peer => {
    const n = nodes[1 - i];
    return { subnet: Prefix.parse(n.subnet)!, vtepIP: n.subnet.split('/')[0], mac: n.mac, publicIP: n.ul };
  };
  /** Plans and applies node i's peers; returns the changes made. */
  const program = async (i: number, direct: Prefix[]) => {
    const plan = planPeers([peerOf(i)], await readActual('flannel.1', ns[i].path, 4, NETWORK), 'flannel.1', NETWORK, direct);
    await applyPlan(plan, ns[i].path);
    return plan.changes;
  };
  const ping = () => inNs(0, ['ping', '-c', '1', '-W', '2', '-I', nodes[0].pod, nodes[1].pod]);
  const routeToB = () => inNs(0, ['ip', 'route', 'show', nodes[1].subnet]).trim();

  beforeAll(async () => {
    sh(['ip', 'link', 'add', 'ul0', 'netns', ns[0].name, 'type', 'veth', 'peer', 'name', 'ul0', 'netns', ns[1].name]);
    for (const [i, n] of nodes.entries()) {
      inNs(i, ['sysctl', '-q', '-w', 'net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.default.rp_filter=0']);
      inNs(i, ['ip', 'addr', 'add', `${n.ul}/24`, 'dev', 'ul0']);
      inNs(i, ['ip', 'link', 'set', 'ul0', 'up']);
      inNs(i, ['ip', 'addr', 'add', `${n.pod}/32`, 'dev', 'lo']);
      await ensureVtep({ name: 'flannel.1', vni: 1, local: n.ul, dev: 'ul0', port: 8472, mac: n.mac, mtu: 1450 }, n.subnet.split('/')[0], ns[i].path);
    }
  });
  afterAll(() => ns.forEach((n) => n.remove()));

  it('over VXLAN: neighbour, FDB entry and onlink route on the VTEP carry a ping', async () => {
    for (const i of [0, 1]) expect((await program(i, [])).length).toBe(3);
    expect(routeToB()).toBe('10.88.2.0/24 via 10.88.2.0 dev flannel.1 onlink');
    expect(ping()).toMatch(/1 received/);
  });

  it('with DirectRouting: a plain route via the peer\'s public address, no neighbour or FDB entry, and the ping still crosses', async () => {
    for (const i of [0, 1]) await program(i, [UNDERLAY]);
    expect(routeToB()).toBe('10.88.2.0/24 via 192.0.2.2 dev ul0');
    expect(inNs(0, ['ip', 'neigh', 'show', 'dev', 'flannel.1']).trim()).toBe('');
    expect(inNs(0, ['bridge', 'fdb', 'show', 'dev', 'flannel.1'])).not.toContain(nodes[1].mac);
    expect(ping()).toMatch(/1 received/);
    // in place: nothing more to do
    expect(await program(0, [UNDERLAY])).toEqual([]);
  });

  it('back to VXLAN: the direct route goes, the VTEP route, neighbour and FDB entry come back', async () => {
    for (const i of [0, 1]) await program(i, []);
    expect(routeToB()).toBe('10.88.2.0/24 via 10.88.2.0 dev flannel.1 onlink');
    expect(inNs(0, ['bridge', 'fdb', 'show', 'dev', 'flannel.1'])).toContain(`${nodes[1].mac} dst 192.0.2.2`);
    expect(ping()).toMatch(/1 received/);
  });
});
