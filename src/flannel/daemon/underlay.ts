// The underlay: the interface VXLAN packets leave by, its addresses, the
// subnets it is directly on (DirectRouting) and its MTU. Chosen as flanneld
// chooses it: --iface (names or addresses, repeatable, first match wins), then
// --iface-regex (repeatable; each matched against the addresses, then the
// names), then --iface-can-reach (the interface of the route to that
// address); with none of them, the interface holding --public-ip /
// --public-ipv6, else the one of the default route. Both families are looked
// up; which ones the overlay needs is the network config's business.
import { IP, Prefix } from '../../net/ip';
import { ipJson } from '../../iproute/exec';
import type { AddrInfo } from '../../iproute/addr';
import { isUp, listLinks, type IpLink } from '../../iproute/link';
import type { IpRoute } from '../../iproute/route';
import type { ExternalInterface } from '../backend/backend';

/** The underlay interface as chosen here: the shape every backend takes (backend.ts). */
export type Underlay = ExternalInterface;

export interface UnderlayOptions {
  /** --iface, repeatable: an interface name or an address it holds; the first that matches wins. */
  iface?: string | readonly string[];
  /** --iface-regex, repeatable, tried after --iface: the first interface with a matching address, else with a matching name. */
  ifaceRegex?: readonly string[];
  /** --iface-can-reach: the interface (and source address) of the route to this address, tried last. */
  ifaceCanReach?: string;
  publicIp?: string;
  publicIpv6?: string;
}

const v4Addrs = (l: IpLink) => (l.addr_info ?? []).filter((a) => a.family === 'inet');
/** Global IPv6 addresses fit for a tunnel: no link-local, failed DAD or privacy address; deprecated ones last. */
const v6Addrs = (l: IpLink) =>
  (l.addr_info ?? [])
    .filter((a) => a.family === 'inet6' && a.scope === 'global' && !a.dadfailed && !a.temporary)
    .sort((a, b) => Number(!!a.deprecated) - Number(!!b.deprecated));
const usable = (l: IpLink) => [...v4Addrs(l), ...v6Addrs(l)];
const has = (addrs: AddrInfo[], ip: IP) => addrs.some((a) => IP.parse(a.local)?.equals(ip));

function parseFlag(flag: string, text: string | undefined, family: 4 | 6): IP | undefined {
  if (text === undefined) return undefined;
  const ip = IP.parse(text);
  if (!ip || ip.family !== family) throw new Error(`${flag} ${JSON.stringify(text)} is not an IPv${family} address`);
  return ip;
}

/** The interface the options pick, and the address that picked it (its family's tunnel source). */
export interface Choice {
  link: IpLink;
  addr?: IP;
}

/**
 * The --iface / --iface-regex choice among `links`, as flanneld makes it;
 * undefined when neither option is given. Throws when they are given and
 * nothing matches.
 */
export function chooseByFlags(links: readonly IpLink[], o: Pick<UnderlayOptions, 'iface' | 'ifaceRegex'>): Choice | undefined {
  const ifaces = typeof o.iface === 'string' ? [o.iface] : (o.iface ?? []);
  for (const want of ifaces) {
    const ip = IP.parse(want);
    const link = ip ? links.find((l) => has(usable(l), ip)) : links.find((l) => l.ifname === want);
    if (link) return { link, ...(ip ? { addr: ip } : {}) };
  }
  for (const text of o.ifaceRegex ?? []) {
    let re: RegExp;
    try {
      re = new RegExp(text);
    } catch (err) {
      throw new Error(`--iface-regex ${JSON.stringify(text)}: ${(err as Error).message}`);
    }
    for (const link of links) {
      const a = usable(link).find((x) => re.test(x.local));
      if (a) return { link, addr: IP.parse(a.local) };
    }
    const link = links.find((l) => re.test(l.ifname));
    if (link) return { link };
  }
  return undefined;
}

/**
 * The subnets `link` is directly on (its IPv4 and global IPv6 prefixes),
 * canonical and distinct; a host address (/32, /128) puts no neighbour on a
 * subnet. DirectRouting's input.
 */
export function connectedSubnets(link: IpLink): Prefix[] {
  const subnets = new Set(usable(link).map((a) => Prefix.parse(`${a.local}/${a.prefixlen}`)!.toString()));
  return [...subnets].map((s) => Prefix.parse(s)!).filter((p) => p.length < (p.family === 4 ? 32 : 128));
}

const listing = (links: readonly IpLink[]) => links.map((l) => `${l.ifname}:[${usable(l).map((a) => a.local).join(',')}]`).join(', ');

async function choose(links: IpLink[], o: UnderlayOptions, publicIP: IP | undefined, publicIPv6: IP | undefined, netns?: string): Promise<Choice> {
  const byFlags = chooseByFlags(links, o);
  if (byFlags) return byFlags;
  const tried = [
    ...(typeof o.iface === 'string' ? [o.iface] : (o.iface ?? [])).map((i) => `--iface ${i}`),
    ...(o.ifaceRegex ?? []).map((r) => `--iface-regex ${r}`),
  ];
  if (o.ifaceCanReach !== undefined) {
    const target = IP.parse(o.ifaceCanReach);
    if (!target) throw new Error(`--iface-can-reach ${JSON.stringify(o.ifaceCanReach)} is not an address`);
    const [route] = await ipJson<IpRoute[]>(['route', 'get', target.toString()], { netns });
    const link = route?.dev ? links.find((l) => l.ifname === route.dev) : undefined;
    if (!link) throw new Error(`--iface-can-reach ${target}: no interface routes there${tried.length ? ` (and no match for ${tried.join(', ')})` : ''}`);
    return { link, ...(route.prefsrc ? { addr: IP.parse(route.prefsrc) } : {}) };
  }
  if (tried.length) throw new Error(`no interface matches ${tried.join(', ')} (there are: ${listing(links)})`);
  if (publicIP) {
    const link = links.find((l) => has(v4Addrs(l), publicIP));
    if (!link) throw new Error(`--public-ip ${publicIP}: no interface has this address (use --iface too when it is a NAT address)`);
    return { link };
  }
  if (publicIPv6) {
    const link = links.find((l) => has(v6Addrs(l), publicIPv6));
    if (!link) throw new Error(`--public-ipv6 ${publicIPv6}: no interface has this address (use --iface too when it is a NAT address)`);
    return { link };
  }
  for (const family of ['-4', '-6']) {
    const routes = await ipJson<{ dev?: string }[]>([family, 'route', 'show', 'default'], { netns });
    const dev = routes.find((r) => r.dev)?.dev;
    const link = dev ? links.find((l) => l.ifname === dev) : undefined;
    if (link) return { link };
  }
  throw new Error('no --iface, --iface-regex, --iface-can-reach, --public-ip or --public-ipv6 given and there is no default route to pick the interface from');
}

/** The underlay the options choose (one listing of the links, plus a route lookup when no flag picks it). */
export async function findUnderlay(o: UnderlayOptions, netns?: string): Promise<Underlay> {
  const publicIP = parseFlag('--public-ip', o.publicIp, 4);
  const publicIPv6 = parseFlag('--public-ipv6', o.publicIpv6, 6);
  const links = await listLinks(netns);
  const { link, addr } = await choose(links, o, publicIP, publicIPv6, netns);
  if (!isUp(link)) throw new Error(`underlay interface ${link.ifname} is down`);
  // The tunnel's source of each family: the address that chose the link, else the public one if the link holds it, else its first.
  const source = (addrs: AddrInfo[], pub: IP | undefined, family: 4 | 6) =>
    (addr?.family === family && has(addrs, addr) ? addr : undefined) ?? (pub && has(addrs, pub) ? pub : IP.parse(addrs[0]?.local ?? ''));
  const addrs4 = v4Addrs(link);
  const addrs6 = v6Addrs(link);
  const localIP = source(addrs4, publicIP, 4);
  const localIPv6 = source(addrs6, publicIPv6, 6);
  const out: Underlay = { dev: link.ifname, mtu: link.mtu, subnets: connectedSubnets(link), ownAddresses: allAddresses(links) };
  if (localIP) Object.assign(out, { localIP, publicIP: publicIP ?? localIP });
  else if (publicIP) throw new Error(`underlay interface ${link.ifname} has no IPv4 address to send from (--public-ip ${publicIP})`);
  if (localIPv6) Object.assign(out, { localIPv6, publicIPv6: publicIPv6 ?? localIPv6 });
  else if (publicIPv6) throw new Error(`underlay interface ${link.ifname} has no global IPv6 address to send from (--public-ipv6 ${publicIPv6})`);
  return out;
}

/** Every address of every interface in `links` (listed with their addresses). */
export function allAddresses(links: readonly IpLink[]): IP[] {
  return links.flatMap((l) => (l.addr_info ?? []).map((a) => IP.parse(a.local)).filter((ip): ip is IP => !!ip));
}

/** For the log: "eth0: local 192.168.1.5, public 192.168.1.5; local6 fd00::5, public6 fd00::5; MTU 1500". */
export function describeUnderlay(u: Underlay): string {
  const parts = [`underlay ${u.dev}:`];
  if (u.localIP) parts.push(`local ${u.localIP}, public ${u.publicIP};`);
  if (u.localIPv6) parts.push(`local ${u.localIPv6}, public ${u.publicIPv6};`);
  parts.push(`MTU ${u.mtu}`);
  return parts.join(' ');
}
