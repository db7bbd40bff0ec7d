// The VTEPs: flannel.<VNI> (IPv4 underlay, IPv4 overlay) and flannel-v6.<VNI>
// (IPv6 underlay, IPv6 overlay), as flanneld names them. Each is created
// nolearning on the underlay, reused when an existing device is compatible,
// replaced when it is not, and given exactly its subnet's network address
// (/32 or /128), its MTU and its MAC.
import { IP } from '../net/ip';
import { runBatchOrThrow } from '../iproute/batch';
import { LinkState, VxlanSpec, createVxlan, deleteLink, getLink, vxlanMismatch } from '../iproute/vxlan';

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
 * addresses are left alone).
 */
export async function ensureVtep(spec: VxlanSpec, address: string, netns?: string): Promise<EnsureResult> {
  let state: LinkState | undefined = await getLink(spec.name, netns);
  let replaced: string | undefined;
  if (state) {
    replaced = vxlanMismatch(state, spec);
    if (replaced) {
      await deleteLink(spec.name, netns);
      state = undefined;
    }
  }
  const created = !state;
  if (!state) await createVxlan(spec, netns);
  const lines: string[][] = [];
  if (state && state.mtu !== spec.mtu) lines.push(['link', 'set', spec.name, 'mtu', String(spec.mtu)]);
  if (state && state.mac !== spec.mac) lines.push(['link', 'set', spec.name, 'address', spec.mac]);
  const v6 = address.includes(':');
  const family = v6 ? 'inet6' : 'inet';
  const want = `${address}/${v6 ? 128 : 32}`;
  const ours = (state?.addrs ?? []).filter((a) => a.family === family && !(v6 && a.local.toLowerCase().startsWith('fe80:')));
  const text = (a: { local: string; prefixlen: number }) => `${IP.parse(a.local)?.toString() ?? a.local}/${a.prefixlen}`;
  for (const a of ours) {
    if (text(a) !== want) lines.push(['addr', 'del', `${a.local}/${a.prefixlen}`, 'dev', spec.name]);
  }
  // nodad: the address is ours by lease, and a tentative address could not be used for a second or two
  if (!ours.some((a) => text(a) === want)) lines.push(['addr', 'replace', want, 'dev', spec.name, ...(v6 ? ['nodad'] : [])]);
  if (!state?.up) lines.push(['link', 'set', spec.name, 'up']);
  await runBatchOrThrow('ip', lines, { netns });
  return { created, ...(replaced ? { replaced } : {}) };
}

export { getLink, deleteLink, vxlanMismatch };
