// Bridge VLAN filtering: lines for `bridge -batch` (runBatch('bridge', ...)).
// Needs a kernel with CONFIG_BRIDGE_VLAN_FILTERING; without it the kernel
// answers "Operation not supported".
import type { Line } from './batch';

export interface VlanOptions {
  /** Frames arriving untagged on the port join this VLAN. */
  pvid?: boolean;
  /** Frames of this VLAN leave the port untagged. */
  untagged?: boolean;
}

/** `vlan add dev DEV vid N[-M] [pvid] [untagged]`. */
export function vlanAdd(dev: string, vid: number | readonly [number, number], o: VlanOptions = {}): Line {
  return ['vlan', 'add', 'dev', dev, 'vid', vidText(vid), ...(o.pvid ? ['pvid'] : []), ...(o.untagged ? ['untagged'] : [])];
}

export function vlanDel(dev: string, vid: number | readonly [number, number]): Line {
  return ['vlan', 'del', 'dev', dev, 'vid', vidText(vid)];
}

function vidText(vid: number | readonly [number, number]): string {
  const [a, b] = typeof vid === 'number' ? [vid, vid] : vid;
  for (const v of [a, b]) if (!Number.isInteger(v) || v < 1 || v > 4094) throw new Error(`invalid VLAN ID ${v}`);
  return a === b ? String(a) : `${a}-${b}`;
}

/** Sorted distinct IDs folded into ranges: [1,2,3,7] -> [[1,3],[7,7]]. */
export function vlanRanges(ids: readonly number[]): [number, number][] {
  const sorted = [...new Set(ids)].sort((x, y) => x - y);
  const out: [number, number][] = [];
  for (const id of sorted) {
    const last = out[out.length - 1];
    if (last && id === last[1] + 1) last[1] = id;
    else out.push([id, id]);
  }
  return out;
}
