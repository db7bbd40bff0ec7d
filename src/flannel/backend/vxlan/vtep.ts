// The VTEPs: flannel.<VNI> (IPv4 underlay, IPv4 overlay) and flannel-v6.<VNI>
// (IPv6 underlay, IPv6 overlay), as flanneld names them. Each is created
// nolearning on the underlay, reused when an existing device is compatible,
// replaced when it is not, and given exactly its subnet's network address
// (/32 or /128), its MTU and its MAC.
import { IP } from '../../../net/ip';
import { runBatchOrThrow, type Line } from '../../../iproute/batch';
import { addrDel, addrReplace } from '../../../iproute/addr';
import { deleteLink, getLink, isUp, linkDel, linkKind, linkMac, linkSet, listLinks } from '../../../iproute/link';
import { vxlanAdd, vxlanAttrs, vxlanMismatch, type VxlanSpec } from '../../../iproute/vxlan';
import type { Log } from '../../log';

export const vtepName = (vni: number) => `flannel.${vni}`;
export const vtep6Name = (vni: number) => `flannel-v6.${vni}`;

export interface EnsureResult {
  created: boolean;
  /** Why an existing device was replaced. */
  replaced?: string;
}

/**
 * Makes `spec.name` a VXLAN device as specified, up, with `address` (/32 for
 * IPv4, /128 for IPv6) as its only address of that family (IPv6 link-local
 * addresses are left alone). One read, then one batch.
 */
export async function ensureVtep(spec: VxlanSpec, address: string, netns?: string): Promise<EnsureResult> {
  const found = await getLink(spec.name, netns);
  const replaced = found && vxlanMismatch(found, spec);
  const state = replaced ? undefined : found;
  const lines: Line[] = [];
  if (replaced) lines.push(linkDel(spec.name));
  if (!state) lines.push(vxlanAdd(spec));
  if (state && state.mtu !== spec.mtu) lines.push(linkSet(spec.name, { mtu: spec.mtu }));
  if (state && linkMac(state) !== spec.mac) lines.push(linkSet(spec.name, { address: spec.mac }));
  const v6 = address.includes(':');
  const family = v6 ? 'inet6' : 'inet';
  const want = `${address}/${v6 ? 128 : 32}`;
  const ours = (state?.addr_info ?? []).filter((a) => a.family === family && !(v6 && a.local.toLowerCase().startsWith('fe80:')));
  const text = (a: { local: string; prefixlen: number }) => `${IP.parse(a.local)?.toString() ?? a.local}/${a.prefixlen}`;
  for (const a of ours) {
    if (text(a) !== want) lines.push(addrDel(spec.name, `${a.local}/${a.prefixlen}`));
  }
  // nodad: the address is ours by lease, and a tentative address could not be used for a second or two
  if (!ours.some((a) => text(a) === want)) lines.push(addrReplace(spec.name, want, { nodad: v6 }));
  if (!state || !isUp(state)) lines.push(linkSet(spec.name, { up: true }));
  await runBatchOrThrow('ip', lines, { netns });
  return { created: !state, ...(replaced ? { replaced } : {}) };
}

/**
 * Removes the vxlan devices named as flannel names VTEPs (flannel.<VNI>,
 * flannel-v6.<VNI>) but those in `keep`: left by an earlier network config
 * (another VNI, a family now off, the vxlan backend before host-gw). Their
 * routes, neighbours and FDB entries go with them; left alone they would
 * keep routing to nodes of the old overlay. `what` says why, in the log.
 */
export async function removeOtherVteps(keep: ReadonlySet<string>, what: string, log: Log): Promise<void> {
  let links;
  try {
    links = await listLinks();
  } catch (err) {
    log(`cannot look for VTEPs of an earlier network config: ${(err as Error).message}`);
    return;
  }
  for (const l of links) {
    if (keep.has(l.ifname) || linkKind(l) !== 'vxlan' || !/^flannel(-v6)?\.\d+$/.test(l.ifname)) continue;
    try {
      await deleteLink(l.ifname);
      log(`removed ${l.ifname} (VNI ${vxlanAttrs(l)?.id}), ${what}, with its routes, neighbours and FDB entries`);
    } catch (err) {
      log(`cannot remove ${l.ifname}, ${what}: ${(err as Error).message}`);
    }
  }
}
