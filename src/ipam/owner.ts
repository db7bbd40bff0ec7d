// Who holds an address: an attachment, keyed as the reference keys its
// reservations (container ID and interface name).

/** `ifname` is undefined for legacy reservations that record only the container ID. */
export interface Owner {
  containerId: string;
  ifname?: string;
}

export const ownerEquals = (a: Owner, b: Owner) => a.containerId === b.containerId && a.ifname === b.ifname;

export const ownerToString = (o: Owner) => (o.ifname === undefined ? o.containerId : `${o.containerId} (${o.ifname})`);
