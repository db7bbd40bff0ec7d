// Finds this node's VTEP from subnet.env alone (it holds the subnet's network
// address as a /32), so CHECK and STATUS work with our daemon or flanneld.
import { ipJson } from '../iproute/exec';
import type { SubnetEnv } from './subnet-env';

interface AddrLink {
  ifname: string;
  flags?: string[];
  linkinfo?: { info_kind?: string };
  addr_info?: { family: string; local: string; prefixlen: number }[];
}

/** Returns what is wrong with the VTEP, or undefined when it is up with its address. */
export async function probeVtep(env: SubnetEnv, netns?: string): Promise<string | undefined> {
  if (!env.subnet) return undefined; // IPv6-only overlays are not run by this daemon
  const want = env.subnet.network.toString();
  const links = await ipJson<AddrLink[]>(['-d', 'addr', 'show'], { netns });
  const vtep = links.find((l) => l.addr_info?.some((a) => a.family === 'inet' && a.local === want && a.prefixlen === 32));
  if (!vtep) return `no VTEP holds ${want}/32 (the network address of FLANNEL_SUBNET ${env.subnet.toAddressString()})`;
  if (vtep.linkinfo?.info_kind !== 'vxlan') return `${vtep.ifname} holds ${want}/32 but is not a vxlan device`;
  if (!vtep.flags?.includes('UP')) return `VTEP ${vtep.ifname} is down`;
  return undefined;
}
