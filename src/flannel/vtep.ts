// The VTEP, flannel.<VNI>: created nolearning on the underlay, reused when an
// existing device is compatible, replaced when it is not, and given exactly
// the subnet's network address /32, its MTU and its MAC.
import { batch } from '../iproute/exec';
import { LinkState, VxlanSpec, createVxlan, deleteLink, getLink, vxlanMismatch } from '../iproute/vxlan';

export const vtepName = (vni: number) => `flannel.${vni}`;

export interface EnsureResult {
  created: boolean;
  /** Why an existing device was replaced. */
  replaced?: string;
}

/** Makes `spec.name` a VXLAN device as specified, with `address`/32 as its only IPv4 address, up. */
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
  const want = `${address}/32`;
  for (const a of state?.addrs ?? []) {
    if (a.family === 'inet' && `${a.local}/${a.prefixlen}` !== want) lines.push(['addr', 'del', `${a.local}/${a.prefixlen}`, 'dev', spec.name]);
  }
  if (!state?.addrs.some((a) => a.family === 'inet' && `${a.local}/${a.prefixlen}` === want)) lines.push(['addr', 'replace', want, 'dev', spec.name]);
  if (!state?.up) lines.push(['link', 'set', spec.name, 'up']);
  await batch('ip', lines, { netns });
  return { created, ...(replaced ? { replaced } : {}) };
}

export { getLink, deleteLink, vxlanMismatch };
