// Ethernet (MAC) addresses: parsing, the unicast test, and random ones.

/** A 48-bit Ethernet address ("02-AA-bb-..." or "02:aa:..."), lower-cased with colons, or undefined. */
export function normalizeMac(mac: string): string | undefined {
  const m = /^([0-9a-f]{2})([:-])([0-9a-f]{2})\2([0-9a-f]{2})\2([0-9a-f]{2})\2([0-9a-f]{2})\2([0-9a-f]{2})$/i.exec(mac);
  if (!m) return undefined;
  return [m[1], m[3], m[4], m[5], m[6], m[7]].map((b) => b.toLowerCase()).join(':');
}

/** The group bit of the first octet: broadcast and multicast addresses. */
export const isMulticastMac = (mac: string) => (parseInt(mac.slice(0, 2), 16) & 1) === 1;

/** A MAC one device can own: unicast and not all zero. */
export const isUnicastMac = (mac: string) => !isMulticastMac(mac) && !/^(00:){5}00$/.test(mac);

/**
 * A random locally administered unicast MAC, as the kernel gives a new device.
 * Math.random is enough (V8 seeds it from the system's entropy) and avoids
 * loading node:crypto, which costs several ms in every short-lived plugin call.
 */
export function randomMac(): string {
  const bytes = Array.from({ length: 6 }, () => Math.floor(Math.random() * 256));
  bytes[0] = (bytes[0] & 0xfc) | 0x02;
  return bytes.map((b) => b.toString(16).padStart(2, '0')).join(':');
}
