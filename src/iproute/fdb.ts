// Forwarding database entries of a VXLAN device (`bridge fdb ... self`): which
// remote VTEP (dst) a MAC lives behind.
import type { Line } from './batch';
import { exec } from './exec';

export interface FdbEntry {
  mac: string;
  dst?: string;
  flags?: string[];
  state?: string;
}

/** FDB entries of `dev` itself. */
export async function listFdb(dev: string, netns?: string): Promise<FdbEntry[]> {
  const { stdout } = await exec(['bridge', '-json', 'fdb', 'show', 'dev', dev], { netns });
  return stdout.trim() ? (JSON.parse(stdout) as FdbEntry[]) : [];
}

/** `bridge` batch lines. */
export const fdbReplace = (mac: string, dst: string, dev: string): Line => ['fdb', 'replace', mac, 'dst', dst, 'dev', dev, 'self', 'permanent'];
export const fdbDel = (mac: string, dst: string, dev: string): Line => ['fdb', 'del', mac, 'dst', dst, 'dev', dev, 'self'];
