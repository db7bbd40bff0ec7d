// Links: command lines for `ip -batch` (pure builders, so plugin logic can be
// unit-tested on the lines it would run), the shape of `ip -json -details
// addr show` output (the one type of a link), and the few reads and deletes
// that stand alone. Names and addresses must be validated before they get
// here; runBatch refuses words -batch would mangle.
import { LineError, isNoDevice, runBatch, type Line } from './batch';
import type { AddrInfo } from './addr';
import { CommandError, ipJson } from './exec';

/** One link as `ip -json -details addr show dev X` prints it (the fields we use). */
export interface IpLink {
  ifindex: number;
  ifname: string;
  flags: string[];
  mtu: number;
  master?: string;
  operstate?: string;
  address?: string;
  /** The peer's ifindex for a veth (in the peer's namespace when link_netnsid is set). */
  link_index?: number;
  link_netnsid?: number;
  /** The alias, when one is set. */
  ifalias?: string;
  /** `link` names the peer when it is in the same namespace. */
  link?: string;
  promiscuity?: number;
  linkinfo?: {
    info_kind?: string;
    info_data?: Record<string, unknown>;
    info_slave_kind?: string;
    info_slave_data?: Record<string, unknown>;
  };
  addr_info?: AddrInfo[];
}

export interface BridgeAddOptions {
  mtu?: number;
  /** Fixed MAC: the kernel then never replaces it with a port's MAC. */
  mac?: string;
  vlanFiltering?: boolean;
}

/** `link add name BR type bridge ...` (fails with "File exists" when it is there). */
export function bridgeAdd(name: string, o: BridgeAddOptions = {}): Line {
  return [
    'link', 'add', 'name', name,
    ...(o.mtu ? ['mtu', String(o.mtu)] : []),
    ...(o.mac ? ['address', o.mac] : []),
    'type', 'bridge',
    ...(o.vlanFiltering ? ['vlan_filtering', '1'] : []),
  ];
}

/** Bridge attributes of an existing bridge. */
export function bridgeSet(name: string, o: { vlanFiltering?: boolean }): Line {
  return ['link', 'set', 'dev', name, 'type', 'bridge', ...(o.vlanFiltering !== undefined ? ['vlan_filtering', o.vlanFiltering ? '1' : '0'] : [])];
}

export interface VethAddOptions {
  /** This end's name (created in the namespace the batch runs in). */
  name: string;
  /** The other end's name. */
  peer: string;
  /** Namespace path (or name) the peer is created in; the same namespace when absent. */
  peerNetns?: string;
  /** MTU of both ends. */
  mtu?: number;
  mac?: string;
  peerMac?: string;
  /** Enslave this end at creation. */
  master?: string;
  /** Bring this end up at creation (the peer cannot be: it has no carrier partner yet). */
  up?: boolean;
}

/** One line creating a veth pair, optionally with the peer in another namespace and this end on a bridge. */
export function vethAdd(o: VethAddOptions): Line {
  const mtu = o.mtu ? ['mtu', String(o.mtu)] : [];
  return [
    'link', 'add', 'name', o.name, ...mtu,
    ...(o.mac ? ['address', o.mac] : []),
    ...(o.master ? ['master', o.master] : []),
    ...(o.up ? ['up'] : []),
    'type', 'veth', 'peer', 'name', o.peer, ...mtu,
    ...(o.peerMac ? ['address', o.peerMac] : []),
    ...(o.peerNetns ? ['netns', o.peerNetns] : []),
  ];
}

export interface LinkSetOptions {
  up?: boolean;
  /** The link's alias (IFLA_IFALIAS): the kernel ignores one given at creation, so it is set here. */
  alias?: string;
  down?: boolean;
  master?: string;
  nomaster?: boolean;
  mtu?: number;
  address?: string;
  promisc?: boolean;
}

export function linkSet(name: string, o: LinkSetOptions): Line {
  return [
    'link', 'set', 'dev', name,
    ...(o.mtu ? ['mtu', String(o.mtu)] : []),
    ...(o.address ? ['address', o.address] : []),
    ...(o.master ? ['master', o.master] : []),
    ...(o.nomaster ? ['nomaster'] : []),
    ...(o.promisc !== undefined ? ['promisc', o.promisc ? 'on' : 'off'] : []),
    ...(o.alias !== undefined ? ['alias', o.alias] : []),
    ...(o.up ? ['up'] : []),
    ...(o.down ? ['down'] : []),
  ];
}

export interface BridgePortOptions {
  hairpin?: boolean;
  isolated?: boolean;
  learning?: boolean;
}

/** Bridge-port flags of an enslaved link (a separate line: `master` and these cannot share one). */
export function bridgePortSet(name: string, o: BridgePortOptions): Line {
  const onOff = (v: boolean) => (v ? 'on' : 'off');
  return [
    'link', 'set', 'dev', name, 'type', 'bridge_slave',
    ...(o.hairpin !== undefined ? ['hairpin', onOff(o.hairpin)] : []),
    ...(o.isolated !== undefined ? ['isolated', onOff(o.isolated)] : []),
    ...(o.learning !== undefined ? ['learning', onOff(o.learning)] : []),
  ];
}

export function linkDel(name: string): Line {
  return ['link', 'del', 'dev', name];
}

/** Reads the veths enslaved to a bridge (use with json). */
export function showVethPorts(bridge: string): Line {
  return ['link', 'show', 'master', bridge, 'type', 'veth'];
}

/** Reads one link with its addresses (use with json + details). */
export function showDev(name: string): Line {
  return ['addr', 'show', 'dev', name];
}

/** First element of a query output, typed. */
export function firstLink(output: unknown): IpLink | undefined {
  return Array.isArray(output) && output.length > 0 ? (output[0] as IpLink) : undefined;
}

export const linkKind = (l: IpLink | undefined) => l?.linkinfo?.info_kind;
export const isUp = (l: IpLink) => l.flags.includes('UP');
export const isPromisc = (l: IpLink) => l.flags.includes('PROMISC');
/** The link's MAC, lower case ('' for a link without one). */
export const linkMac = (l: IpLink) => (l.address ?? '').toLowerCase();

/** A link with its details and addresses; undefined when there is no such device. One exec. */
export async function getLink(name: string, netns?: string): Promise<IpLink | undefined> {
  try {
    return firstLink(await ipJson(['-details', ...showDev(name)], { netns }));
  } catch (err) {
    if (err instanceof CommandError && isNoDevice(err.result.stderr)) return undefined;
    throw err;
  }
}

/** Every link with its details and addresses (one exec). */
export async function listLinks(netns?: string): Promise<IpLink[]> {
  return ipJson<IpLink[]>(['-details', 'addr', 'show'], { netns });
}

/** Deletes a link; fine when it is not there. One exec. */
export async function deleteLink(name: string, netns?: string): Promise<void> {
  const res = await runBatch('ip', [linkDel(name)], { netns });
  const err = res.errors[0];
  if (err !== undefined && !isNoDevice(err)) throw new LineError('ip', linkDel(name), err);
}
