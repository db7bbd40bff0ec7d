// subnet.env: the file the daemon writes once it holds a lease, and the CNI
// plugin reads on every ADD. Same keys and format as flanneld's, so either side
// can be flannel's own.
import { Prefix } from '../net/ip';
import { ensureDir, readIfExists, writeFileAtomic } from '../util/fs';
import { dirname } from 'node:path';
import type { LeaseSubnets } from './lease';

export const DEFAULT_SUBNET_FILE = '/run/flannel/subnet.env';

export interface SubnetEnv {
  /** FLANNEL_NETWORK: the whole overlay (flannel allows a comma-separated list). */
  networks: Prefix[];
  /** FLANNEL_SUBNET: this node's subnet, with the first host address (10.244.1.1/24). */
  subnet?: Prefix;
  ipv6Networks: Prefix[];
  ipv6Subnet?: Prefix;
  mtu?: number;
  ipMasq?: boolean;
}

/** What is wrong with a subnet.env: `missing` keys (maybe still being written) or a bad value. */
export class SubnetEnvError extends Error {
  constructor(
    message: string,
    readonly missing: boolean,
  ) {
    super(message);
  }
}

function prefixList(key: string, value: string, family: 4 | 6): Prefix[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const p = Prefix.parse(s);
      if (!p || p.family !== family) throw new SubnetEnvError(`${key}=${value}: ${JSON.stringify(s)} is not an IPv${family} CIDR`, false);
      return p;
    });
}

function onePrefix(key: string, value: string, family: 4 | 6): Prefix {
  const p = Prefix.parse(value.trim());
  if (!p || p.family !== family) throw new SubnetEnvError(`${key}=${value} is not an IPv${family} CIDR`, false);
  return p;
}

/** Parses subnet.env text. Unknown keys, blank lines and comments are ignored, as flannel's plugin does. */
export function parseSubnetEnv(text: string): SubnetEnv {
  const env: SubnetEnv = { networks: [], ipv6Networks: [] };
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    const key = line.slice(0, eq).trim();
    const value = line.slice(eq + 1).trim().replace(/^"(.*)"$/, '$1');
    switch (key) {
      case 'FLANNEL_NETWORK':
        env.networks = prefixList(key, value, 4);
        break;
      case 'FLANNEL_SUBNET':
        env.subnet = onePrefix(key, value, 4);
        break;
      case 'FLANNEL_IPV6_NETWORK':
        env.ipv6Networks = prefixList(key, value, 6);
        break;
      case 'FLANNEL_IPV6_SUBNET':
        env.ipv6Subnet = onePrefix(key, value, 6);
        break;
      case 'FLANNEL_MTU': {
        const n = Number(value);
        if (!/^\d+$/.test(value) || n < 68 || n > 65535) throw new SubnetEnvError(`FLANNEL_MTU=${value} is not an MTU (68..65535)`, false);
        env.mtu = n;
        break;
      }
      case 'FLANNEL_IPMASQ':
        if (value !== 'true' && value !== 'false') throw new SubnetEnvError(`FLANNEL_IPMASQ=${value} is not true or false`, false);
        env.ipMasq = value === 'true';
        break;
    }
  }
  return env;
}

/** Checks a parsed subnet.env has what the CNI plugin needs; names the first missing key. */
export function requireComplete(env: SubnetEnv): void {
  if (!env.subnet && !env.ipv6Subnet) throw new SubnetEnvError('FLANNEL_SUBNET (or FLANNEL_IPV6_SUBNET) is missing', true);
  if (env.subnet && env.networks.length === 0) throw new SubnetEnvError('FLANNEL_NETWORK is missing', true);
  if (env.ipv6Subnet && env.ipv6Networks.length === 0) throw new SubnetEnvError('FLANNEL_IPV6_NETWORK is missing', true);
  if (env.mtu === undefined) throw new SubnetEnvError('FLANNEL_MTU is missing', true);
  if (env.ipMasq === undefined) throw new SubnetEnvError('FLANNEL_IPMASQ is missing', true);
}

/** Reads a complete subnet.env now, without waiting; a SubnetEnvError says what is missing or wrong. */
export function readSubnetEnv(path: string): SubnetEnv {
  const text = readIfExists(path);
  if (text === undefined) throw new SubnetEnvError(`${path} does not exist`, true);
  const env = parseSubnetEnv(text);
  requireComplete(env);
  return env;
}

/** The lease subnets a subnet.env names (FLANNEL_SUBNET 10.244.1.1/24 is the lease's 10.244.1.0/24). */
export function subnetsOf(env: SubnetEnv): LeaseSubnets {
  const net = (p?: Prefix) => (p ? Prefix.of(p.network, p.length) : undefined);
  return { subnet: net(env.subnet), ipv6Subnet: net(env.ipv6Subnet) };
}

/** Renders subnet.env exactly as flanneld does (its key order). */
export function formatSubnetEnv(env: SubnetEnv): string {
  let out = '';
  if (env.networks.length) out += `FLANNEL_NETWORK=${env.networks.map(String).join(',')}\n`;
  if (env.subnet) out += `FLANNEL_SUBNET=${env.subnet.toAddressString()}\n`;
  if (env.ipv6Networks.length) out += `FLANNEL_IPV6_NETWORK=${env.ipv6Networks.map(String).join(',')}\n`;
  if (env.ipv6Subnet) out += `FLANNEL_IPV6_SUBNET=${env.ipv6Subnet.toAddressString()}\n`;
  if (env.mtu !== undefined) out += `FLANNEL_MTU=${env.mtu}\n`;
  if (env.ipMasq !== undefined) out += `FLANNEL_IPMASQ=${env.ipMasq}\n`;
  return out;
}

/** Writes subnet.env atomically (readers see the old file or the new one, never half of it). */
export function writeSubnetEnv(path: string, env: SubnetEnv): void {
  ensureDir(dirname(path), 0o755);
  writeFileAtomic(path, formatSubnetEnv(env), { mode: 0o644, durable: true });
}
