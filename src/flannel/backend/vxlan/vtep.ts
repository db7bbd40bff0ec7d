// The VTEPs: flannel.<VNI> (IPv4 underlay, IPv4 overlay) and flannel-v6.<VNI>
// (IPv6 underlay, IPv6 overlay), as flanneld names them. Each is created
// nolearning on the underlay, reused when an existing device is compatible,
// replaced when it is not, and given exactly its subnet's network address
// (/32 or /128), its MTU and its MAC.
import { IP } from '../../../net/ip';
import { runBatchOrThrow, type Line } from '../../../iproute/batch';
import { addrDel, addrReplace } from '../../../iproute/addr';
import { getLink, isUp, linkDel, linkMac, linkSet } from '../../../iproute/link';
import { vxlanAdd, vxlanMismatch, type VxlanSpec } from '../../../iproute/vxlan';

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
