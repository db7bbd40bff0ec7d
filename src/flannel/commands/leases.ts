// `vxlan-flannel leases` and `vxlan-flannel release`: every lease in a store,
// as rows (both subnets, both public addresses and both MACs of a lease), and
// removing the lease of a node that left without --release-on-exit.
import type { Prefix } from '../../net/ip';
import { formatTable } from '../../util/table';
import { type LeaseSubnets, leaseKey, subnetOf } from '../lease';
import { printable } from '../log';
import type { LeaseList } from '../manager';
import type { LeaseStore } from '../store/store';

/** One lease as `leases --json` prints it (null: the lease has no such field). */
export interface LeaseRow {
  subnet: string | null;
  publicIP: string | null;
  backendType: string;
  vtepMAC: string | null;
  expiration: string | null;
  ipv6Subnet: string | null;
  publicIPv6: string | null;
  v6VtepMAC: string | null;
}

export function leaseRows(list: LeaseList): LeaseRow[] {
  return list.leases.map((l) => ({
    subnet: l.subnet?.toString() ?? null,
    publicIP: l.attrs.publicIP?.toString() ?? null,
    backendType: l.attrs.backendType,
    vtepMAC: l.attrs.vtepMAC ?? null,
    expiration: l.expiration !== undefined ? new Date(l.expiration).toISOString() : null,
    ipv6Subnet: l.ipv6Subnet?.toString() ?? null,
    publicIPv6: l.attrs.publicIPv6?.toString() ?? null,
    v6VtepMAC: l.attrs.v6VtepMAC ?? null,
  }));
}

/** A table, one lease a line (a family's values side by side), then the entries that could not be read. */
export function formatLeases(list: LeaseList): string {
  const both = (...v: (string | null)[]) => v.filter(Boolean).join(',') || '-';
  const rows = leaseRows(list).map((r) => [
    both(r.subnet, r.ipv6Subnet),
    both(r.publicIP, r.publicIPv6),
    printable(r.backendType) || '-',
    both(r.vtepMAC, r.v6VtepMAC),
    r.expiration ?? '-', // etcd's TTLs are not listed; a file-store reservation has none
  ]);
  const bad = list.bad.map((b) => `unreadable ${JSON.stringify(b.key)}: ${printable(b.why)}\n`);
  return formatTable(['SUBNET', 'PUBLIC IP', 'BACKEND', 'VTEP MAC', 'EXPIRES'], rows) + bad.join('');
}

/**
 * Removes the lease holding `subnet` (one of its subnets, for a dual-stack
 * lease), or an unreadable entry under exactly that subnet's key. Neither
 * exists: an error, so that a typo does not look like a release.
 */
export async function releaseSubnet(store: LeaseStore, subnet: Prefix): Promise<void> {
  const { leases, bad } = await store.list();
  const held = leases.find((l) => subnetOf(l, subnet.family)?.toString() === subnet.toString());
  const alone: LeaseSubnets = subnet.family === 4 ? { subnet } : { ipv6Subnet: subnet };
  if (!held && !bad.some((b) => b.key === leaseKey(alone))) {
    throw new Error(`no lease holds ${subnet} in ${store.description} (see \`vxlan-flannel leases\`)`);
  }
  await store.remove(held ?? alone);
}
