// Finds this node's VTEPs from subnet.env alone (each holds its subnet's
// network address: /32 for IPv4, /128 for IPv6), so CHECK and STATUS work
// with our daemon or flanneld. subnet.env does not say which backend wrote
// it: the CNI plugin asks with `routedOk`, and a node with no device holding
// the address and no flannel VTEP at all runs a routed backend (host-gw),
// which has no device to look at.
import { IP, Prefix } from '../../../net/ip';
import { isUp, linkKind, listLinks, type IpLink } from '../../../iproute/link';
import type { SubnetEnv } from '../../subnet-env';

const isFlannelVtep = (l: IpLink) => linkKind(l) === 'vxlan' && /^flannel(-v6)?\.\d+$/.test(l.ifname);

function check(links: IpLink[], subnet: Prefix, key: string, routedOk: boolean): string | undefined {
  const v6 = subnet.family === 6;
  const want = subnet.network.toString();
  const hostLen = v6 ? 128 : 32;
  const vtep = links.find((l) =>
    l.addr_info?.some((a) => a.family === (v6 ? 'inet6' : 'inet') && IP.parse(a.local)?.toString() === want && a.prefixlen === hostLen),
  );
  if (!vtep && routedOk && !links.some(isFlannelVtep)) return undefined;
  if (!vtep) return `no VTEP holds ${want}/${hostLen} (the network address of ${key} ${subnet.toAddressString()})`;
  if (linkKind(vtep) !== 'vxlan') return `${vtep.ifname} holds ${want}/${hostLen} but is not a vxlan device`;
  if (!isUp(vtep)) return `VTEP ${vtep.ifname} is down`;
  return undefined;
}

/**
 * Returns what is wrong with the VTEPs (one per family in subnet.env), or
 * undefined when they are up with their addresses. `routedOk`: a node
 * without any flannel VTEP passes (host-gw).
 */
export async function probeVtep(env: SubnetEnv, netns?: string, routedOk = false): Promise<string | undefined> {
  if (!env.subnet && !env.ipv6Subnet) return undefined;
  const links = await listLinks(netns);
  return (env.subnet && check(links, env.subnet, 'FLANNEL_SUBNET', routedOk)) || (env.ipv6Subnet && check(links, env.ipv6Subnet, 'FLANNEL_IPV6_SUBNET', routedOk)) || undefined;
}
