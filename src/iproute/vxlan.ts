// VXLAN devices and the routes an overlay puts on them: reading their state
// (`ip -json -details`) and the command lines that create or change them.
import { IP } from '../net/ip';
import { CommandError, exec, ipJson } from './exec';

export interface AddrInfo {
  family: string;
  local: string;
  prefixlen: number;
}

export interface LinkState {
  name: string;
  ifindex: number;
  mac: string;
  mtu: number;
  up: boolean;
  kind?: string;
  vxlan?: { id?: number; local?: string; link?: string; port?: number; learning?: boolean };
  addrs: AddrInfo[];
}

interface RawLink {
  ifindex: number;
  ifname: string;
  flags?: string[];
  mtu: number;
  address?: string;
  linkinfo?: { info_kind?: string; info_data?: Record<string, unknown> };
  addr_info?: AddrInfo[];
}

function toState(l: RawLink): LinkState {
  const d = l.linkinfo?.info_data ?? {};
  return {
    name: l.ifname,
    ifindex: l.ifindex,
    mac: (l.address ?? '').toLowerCase(),
    mtu: l.mtu,
    up: !!l.flags?.includes('UP'),
    ...(l.linkinfo?.info_kind ? { kind: l.linkinfo.info_kind } : {}),
    ...(l.linkinfo?.info_kind === 'vxlan'
      ? {
          vxlan: {
            id: d.id as number | undefined,
            local: (d.local ?? d.local6) as string | undefined,
            link: d.link as string | undefined,
            port: d.port as number | undefined,
            learning: d.learning as boolean | undefined,
          },
        }
      : {}),
    addrs: l.addr_info ?? [],
  };
}

/** A link with its details and addresses; undefined when there is no such device. */
export async function getLink(name: string, netns?: string): Promise<LinkState | undefined> {
  try {
    const links = await ipJson<RawLink[]>(['-details', 'addr', 'show', 'dev', name], { netns });
    return links[0] ? toState(links[0]) : undefined;
  } catch (err) {
    if (err instanceof CommandError && /does not exist|Cannot find device/i.test(err.result.stderr)) return undefined;
    throw err;
  }
}

/** Every link with its addresses (one exec). */
export async function listLinks(netns?: string): Promise<LinkState[]> {
  return (await ipJson<RawLink[]>(['-details', 'addr', 'show'], { netns })).map(toState);
}

export interface VxlanSpec {
  name: string;
  vni: number;
  /** Local (source) address of the tunnel: IPv4, or IPv6 for an IPv6 underlay. */
  local: string;
  /** Underlay device. */
  dev: string;
  port: number;
  mac: string;
  mtu: number;
}

/** Why an existing device cannot serve as `spec` (kind, VNI, local, dev, port, learning), or undefined. */
export function vxlanMismatch(state: LinkState, spec: VxlanSpec): string | undefined {
  if (state.kind !== 'vxlan' || !state.vxlan) return `it is ${state.kind ? `a ${state.kind} device` : 'not a vxlan device'}`;
  const v = state.vxlan;
  const diffs: string[] = [];
  if (v.id !== spec.vni) diffs.push(`VNI ${v.id} (want ${spec.vni})`);
  const sameIP = (a: string | undefined, b: string) => a !== undefined && (IP.parse(a)?.toString() ?? a) === (IP.parse(b)?.toString() ?? b);
  if (!sameIP(v.local, spec.local)) diffs.push(`local ${v.local ?? 'unset'} (want ${spec.local})`);
  if (v.link !== spec.dev) diffs.push(`dev ${v.link ?? 'unset'} (want ${spec.dev})`);
  if (v.port !== spec.port) diffs.push(`port ${v.port} (want ${spec.port})`);
  if (v.learning !== false) diffs.push('learning on (want nolearning)');
  return diffs.length ? diffs.join(', ') : undefined;
}

/** `ip link add` for a VXLAN device: nolearning, fixed MAC and MTU, created down. */
export async function createVxlan(spec: VxlanSpec, netns?: string): Promise<void> {
  await exec(
    ['ip', 'link', 'add', spec.name, 'address', spec.mac, 'mtu', String(spec.mtu), 'type', 'vxlan', 'id', String(spec.vni),
      'local', spec.local, 'dev', spec.dev, 'dstport', String(spec.port), 'nolearning'],
    { netns },
  );
}

export async function deleteLink(name: string, netns?: string): Promise<void> {
  try {
    await exec(['ip', 'link', 'del', name], { netns });
  } catch (err) {
    if (err instanceof CommandError && /does not exist|Cannot find device/i.test(err.result.stderr)) return;
    throw err;
  }
}

export interface RouteEntry {
  dst: string;
  gateway?: string;
  flags?: string[];
  /** "kernel" for the routes the kernel adds for the device's own addresses. */
  protocol?: string;
}

/** IPv4 (or IPv6) routes of the main table through `dev`. */
export async function listRoutes(dev: string, netns?: string, family: 4 | 6 = 4): Promise<RouteEntry[]> {
  return ipJson<RouteEntry[]>([`-${family}`, 'route', 'show', 'dev', dev], { netns });
}

export const routeReplaceOnlink = (dst: string, via: string, dev: string) => ['route', 'replace', dst, 'via', via, 'dev', dev, 'onlink'];
export const routeDel = (dst: string, dev: string) => ['route', 'del', dst, 'dev', dev];

