// The underlay: the interface VXLAN packets leave by, its addresses and MTU.
// Both families are looked up; which ones the overlay needs is the network
// config's business (the daemon checks after reading it).
import { IP } from '../net/ip';
import { ipJson } from '../iproute/exec';
import type { AddrInfo } from '../iproute/addr';
import { isUp, listLinks, type IpLink } from '../iproute/link';

export interface Underlay {
  dev: string;
  /** Source address of the IPv4 tunnel (on `dev`); undefined when it has no IPv4 address. */
  localIP?: IP;
  /** Address peers send to (the lease's PublicIP); localIP unless --public-ip says otherwise. */
  publicIP?: IP;
  /** Source address of the IPv6 tunnel: --public-ipv6 if `dev` holds it, else its first global IPv6. */
  localIPv6?: IP;
  /** The lease's PublicIPv6; localIPv6 unless --public-ipv6 says otherwise. */
  publicIPv6?: IP;
  mtu: number;
}

const v4Addrs = (l: IpLink) => (l.addr_info ?? []).filter((a) => a.family === 'inet');
/** Global IPv6 addresses fit for a tunnel: no link-local, failed DAD or privacy address; deprecated ones last. */
const v6Addrs = (l: IpLink) =>
  (l.addr_info ?? [])
    .filter((a) => a.family === 'inet6' && a.scope === 'global' && !a.dadfailed && !a.temporary)
    .sort((a, b) => Number(!!a.deprecated) - Number(!!b.deprecated));
const has = (addrs: AddrInfo[], ip: IP) => addrs.some((a) => IP.parse(a.local)?.equals(ip));

function parseFlag(flag: string, text: string | undefined, family: 4 | 6): IP | undefined {
  if (text === undefined) return undefined;
  const ip = IP.parse(text);
  if (!ip || ip.family !== family) throw new Error(`${flag} ${JSON.stringify(text)} is not an IPv${family} address`);
  return ip;
}

export async function findUnderlay(opts: { iface?: string; publicIp?: string; publicIpv6?: string }, netns?: string): Promise<Underlay> {
  const publicIP = parseFlag('--public-ip', opts.publicIp, 4);
  const publicIPv6 = parseFlag('--public-ipv6', opts.publicIpv6, 6);
  const links = await listLinks(netns);
  let link: IpLink | undefined;
  if (opts.iface) {
    link = links.find((l) => l.ifname === opts.iface);
    if (!link) throw new Error(`--iface ${opts.iface}: no such interface (there are: ${links.map((l) => l.ifname).join(', ')})`);
  } else if (publicIP) {
    link = links.find((l) => has(v4Addrs(l), publicIP));
    if (!link) throw new Error(`--public-ip ${publicIP}: no interface has this address (use --iface too when it is a NAT address)`);
  } else if (publicIPv6) {
    link = links.find((l) => has(v6Addrs(l), publicIPv6));
    if (!link) throw new Error(`--public-ipv6 ${publicIPv6}: no interface has this address (use --iface too when it is a NAT address)`);
  } else {
    for (const family of ['-4', '-6']) {
      const routes = await ipJson<{ dev?: string }[]>([family, 'route', 'show', 'default'], { netns });
      const dev = routes.find((r) => r.dev)?.dev;
      link = dev ? links.find((l) => l.ifname === dev) : undefined;
      if (link) break;
    }
    if (!link) throw new Error('no --iface, --public-ip or --public-ipv6 given and there is no default route to pick the interface from');
  }
  if (!isUp(link)) throw new Error(`underlay interface ${link.ifname} is down`);
  const addrs4 = v4Addrs(link);
  const localIP = publicIP && has(addrs4, publicIP) ? publicIP : IP.parse(addrs4[0]?.local ?? '');
  const addrs6 = v6Addrs(link);
  const localIPv6 = publicIPv6 && has(addrs6, publicIPv6) ? publicIPv6 : IP.parse(addrs6[0]?.local ?? '');
  const out: Underlay = { dev: link.ifname, mtu: link.mtu };
  if (localIP) Object.assign(out, { localIP, publicIP: publicIP ?? localIP });
  else if (publicIP) throw new Error(`underlay interface ${link.ifname} has no IPv4 address to send from (--public-ip ${publicIP})`);
  if (localIPv6) Object.assign(out, { localIPv6, publicIPv6: publicIPv6 ?? localIPv6 });
  else if (publicIPv6) throw new Error(`underlay interface ${link.ifname} has no global IPv6 address to send from (--public-ipv6 ${publicIPv6})`);
  return out;
}

/** For the log: "eth0: local 192.168.1.5, public 192.168.1.5; local6 fd00::5, public6 fd00::5; MTU 1500". */
export function describeUnderlay(u: Underlay): string {
  const parts = [`underlay ${u.dev}:`];
  if (u.localIP) parts.push(`local ${u.localIP}, public ${u.publicIP};`);
  if (u.localIPv6) parts.push(`local ${u.localIPv6}, public ${u.publicIPv6};`);
  parts.push(`MTU ${u.mtu}`);
  return parts.join(' ');
}
