// Deterministic names: the host end of an attachment's veth and the tags that
// mark its firewall rules are derived from (network, container ID, ifname),
// so DEL, CHECK and GC find them without any saved state.
import { sha256Hex } from '../util/sha256';

/**
 * "veth" + 11 hex digits of sha256(containerID, ifname): 15 bytes, the most a
 * link name may have. Longer than the reference's random "veth" + 8 hex, so
 * the two can never collide on a shared bridge.
 */
export function hostVethName(containerId: string, ifname: string): string {
  return 'veth' + sha256Hex(`veth\0${containerId}\0${ifname}`).slice(0, 11);
}

/** A name hostVethName can produce. */
export const isHostVethName = (name: string) => /^veth[0-9a-f]{11}$/.test(name);

/** The host end of the veth that carries a VLAN's gateway address (one per bridge and VLAN). */
export function vlanGatewayPeerName(bridge: string, vlan: number): string {
  return 'veth' + sha256Hex(`vlan-gw\0${bridge}\0${vlan}`).slice(0, 11);
}

/** The link that holds a VLAN's gateway address: "<bridge>.<vlan>" as in the reference. */
export const vlanGatewayName = (bridge: string, vlan: number) => `${bridge}.${vlan}`;

export interface Tags {
  /** 8 hex: the network. */
  netTag: string;
  /** 20 hex: the attachment (network, container ID, ifname). */
  attTag: string;
}

export const netTag = (network: string) => sha256Hex(`net\0${network}`).slice(0, 8);

export function attachmentTags(network: string, containerId: string, ifname: string): Tags {
  return { netTag: netTag(network), attTag: sha256Hex(`att\0${network}\0${containerId}\0${ifname}`).slice(0, 20) };
}

/**
 * The host veth's alias: its attachment's tags in the form the masquerade
 * rules' comments carry them, so GC can tell which network's attachment a
 * veth on a (possibly shared) bridge belongs to without knowing container IDs.
 */
export const vethAlias = (t: Tags) => `cni-ts:${t.netTag}:${t.attTag}`;

export function parseVethAlias(alias: string): Tags | undefined {
  const m = /^cni-ts:([0-9a-f]{8}):([0-9a-f]{20})$/.exec(alias);
  return m ? { netTag: m[1], attTag: m[2] } : undefined;
}

/** The readable part of a masquerade rule's comment, for operators. */
export const masqLabel = (network: string, containerId: string, ifname: string) => `net=${network} id=${containerId} if=${ifname}`;
