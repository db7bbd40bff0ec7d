// VXLAN devices: the spec an overlay asks for, the line that creates one, its
// attributes as `ip -json -details` prints them, and why an existing device
// cannot serve a spec.
import { IP } from '../net/ip';
import type { Line } from './batch';
import type { IpLink } from './link';

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
  /** flannel's Backend.GBP: VXLAN Group Policy extension (iproute2 `gbp`). */
  gbp?: boolean;
  /** flannel's Backend.Learning: the kernel learns remote MACs (iproute2 `learning`); off by default, the FDB is ours. */
  learning?: boolean;
}

/** The VXLAN attributes of a link (`linkinfo.info_data`), or undefined for another kind. */
export interface VxlanAttrs {
  id?: number;
  local?: string;
  /** The underlay device's name. */
  link?: string;
  port?: number;
  learning?: boolean;
  gbp?: boolean;
}

export function vxlanAttrs(l: IpLink): VxlanAttrs | undefined {
  if (l.linkinfo?.info_kind !== 'vxlan') return undefined;
  const d = l.linkinfo.info_data ?? {};
  return {
    id: d.id as number | undefined,
    local: (d.local ?? d.local6) as string | undefined,
    link: d.link as string | undefined,
    port: d.port as number | undefined,
    learning: d.learning as boolean | undefined,
    // iproute2 prints "gbp" only when it is on
    gbp: d.gbp === true,
  };
}

/** `link add` of a VXLAN device: fixed MAC and MTU, created down; nolearning unless the spec asks for learning. */
export function vxlanAdd(spec: VxlanSpec): Line {
  return [
    'link', 'add', 'name', spec.name, 'address', spec.mac, 'mtu', String(spec.mtu),
    'type', 'vxlan', 'id', String(spec.vni), 'local', spec.local, 'dev', spec.dev, 'dstport', String(spec.port),
    spec.learning ? 'learning' : 'nolearning',
    ...(spec.gbp ? ['gbp'] : []),
  ];
}

/** Why an existing device cannot serve as `spec` (kind, VNI, local, dev, port, learning, gbp), or undefined. */
export function vxlanMismatch(link: IpLink, spec: VxlanSpec): string | undefined {
  const v = vxlanAttrs(link);
  const kind = link.linkinfo?.info_kind;
  if (!v) return `it is ${kind ? `a ${kind} device` : 'not a vxlan device'}`;
  const diffs: string[] = [];
  if (v.id !== spec.vni) diffs.push(`VNI ${v.id} (want ${spec.vni})`);
  const sameIP = (a: string | undefined, b: string) => a !== undefined && (IP.parse(a)?.toString() ?? a) === (IP.parse(b)?.toString() ?? b);
  if (!sameIP(v.local, spec.local)) diffs.push(`local ${v.local ?? 'unset'} (want ${spec.local})`);
  if (v.link !== spec.dev) diffs.push(`dev ${v.link ?? 'unset'} (want ${spec.dev})`);
  if (v.port !== spec.port) diffs.push(`port ${v.port} (want ${spec.port})`);
  const learning = !!spec.learning;
  if (v.learning !== learning) diffs.push(`learning ${v.learning === false ? 'off' : 'on'} (want ${learning ? 'learning' : 'nolearning'})`);
  if (v.gbp !== !!spec.gbp) diffs.push(`gbp ${v.gbp ? 'on' : 'off'} (want ${spec.gbp ? 'gbp' : 'no gbp'})`);
  return diffs.length ? diffs.join(', ') : undefined;
}
