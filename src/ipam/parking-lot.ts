// Parked addresses (ipam.stickyTTL): what a pod held when its attachment was
// deleted, kept for it until the parking ends. The reservation files stay as
// they were, so the Go host-local reads a parked address as taken; who it is
// parked for and until when is ours alone:
//   <dataDir>/.cni-ts/<network>/parked/<sha256 of ["namespace","name","ifname"]>   one JSON record per parking
//   <dataDir>/.cni-ts/<network>/parked/next-expiry                          the earliest end, so calls
//                                                                           need not read every record
// A record is a claim to check, never a fact: it counts only for the pod and
// interface it names itself (a file found under a pod's key that names another
// is no parking of this pod's), and an address counts as parked only while its
// reservation file still names the attachment that parked it.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { IP } from '../net/ip';
import { ensureDir, readIfExists, removeFile, writeFileAtomic } from '../util/fs';
import { sha256Hex } from '../util/sha256';
import type { Owner } from './owner';

/** The pod an attachment belongs to, from CNI_ARGS K8S_POD_NAMESPACE and K8S_POD_NAME. */
export interface Pod {
  namespace: string;
  name: string;
}

/** A name printed as it is when plain, else quoted (a "/" or a control character in it cannot mislead a reader). */
const shown = (s: string) => (/^[A-Za-z0-9._-]+$/.test(s) ? s : JSON.stringify(s));

/** A pod for log lines and `host-local ls`: `prod/web-0`, `"team/a"/db`. */
export const podToString = (p: Pod) => `${shown(p.namespace)}/${shown(p.name)}`;

export const samePod = (a: Pod, b: Pod) => a.namespace === b.namespace && a.name === b.name;

export interface Parking {
  pod: Pod;
  /** The attachment that parked them: their files still name it. */
  attachment: Owner;
  ips: IP[];
  parkedAt: number;
  expiresAt: number;
}

interface Record {
  namespace: string;
  name: string;
  containerID: string;
  ifname: string | null;
  ips: string[];
  parkedAt: string;
  expiresAt: string;
}

const NEXT_EXPIRY = 'next-expiry';

export class ParkingLot {
  private readonly dir: string;

  constructor(metaDir: string) {
    this.dir = join(metaDir, 'parked');
  }

  /** The parking of `pod`'s interface `ifname`, if there is one. */
  get(pod: Pod, ifname: string | undefined): Parking | undefined {
    const p = this.read(this.fileOf(pod, ifname));
    const same = p && p.pod.namespace === pod.namespace && p.pod.name === pod.name && p.attachment.ifname === ifname;
    return same ? p : undefined;
  }

  /** Every parking, oldest first (a hand-damaged record is skipped). */
  all(): Parking[] {
    let names: string[];
    try {
      names = fs.readdirSync(this.dir);
    } catch {
      return [];
    }
    const out: Parking[] = [];
    for (const name of names) {
      // '.' names are writeFileAtomic's scratch files
      const p = name === NEXT_EXPIRY || name.startsWith('.') ? undefined : this.read(join(this.dir, name));
      if (p) out.push(p);
    }
    return out.sort((a, b) => a.parkedAt - b.parkedAt);
  }

  /** Writes (or replaces) a parking; throws when it cannot be written (a full filesystem). */
  save(p: Parking): void {
    ensureDir(this.dir);
    const record: Record = {
      namespace: p.pod.namespace,
      name: p.pod.name,
      containerID: p.attachment.containerId,
      ifname: p.attachment.ifname ?? null,
      ips: p.ips.map(String),
      parkedAt: new Date(p.parkedAt).toISOString(),
      expiresAt: new Date(p.expiresAt).toISOString(),
    };
    // Not synced (~5 ms a call): a record lost in a crash leaves its addresses reserved by a
    // deleted container, which GC releases; a torn one reads as no parking.
    writeFileAtomic(this.fileOf(p.pod, p.attachment.ifname), JSON.stringify(record) + '\n', { mode: 0o600 });
    const next = this.nextExpiry();
    if (next === undefined || p.expiresAt < next) this.writeNextExpiry(p.expiresAt);
  }

  /** Removes a parking (never needs free space). */
  remove(p: Parking): void {
    removeFile(this.fileOf(p.pod, p.attachment.ifname));
  }

  /** Whether some parking may have ended by `now`: one small read, so every call can ask. */
  due(now: number): boolean {
    const next = this.nextExpiry();
    return next !== undefined && next <= now;
  }

  /** Records when the next of `remaining` ends (none: the hint goes). */
  resetNextExpiry(remaining: readonly Parking[]): void {
    if (remaining.length === 0) removeFile(join(this.dir, NEXT_EXPIRY));
    else this.writeNextExpiry(Math.min(...remaining.map((p) => p.expiresAt)));
  }

  private nextExpiry(): number | undefined {
    const text = readIfExists(join(this.dir, NEXT_EXPIRY));
    const n = text === undefined ? NaN : Number(text);
    return Number.isFinite(n) ? n : undefined;
  }

  private writeNextExpiry(ms: number): void {
    writeFileAtomic(join(this.dir, NEXT_EXPIRY), String(ms), { mode: 0o600 });
  }

  /** JSON keeps the three apart: "a/b" + "c" and "a" + "b/c" are different keys. */
  private fileOf(pod: Pod, ifname: string | undefined): string {
    return join(this.dir, sha256Hex(JSON.stringify([pod.namespace, pod.name, ifname ?? null])));
  }

  private read(file: string): Parking | undefined {
    const text = readIfExists(file);
    if (text === undefined) return undefined;
    try {
      const r = JSON.parse(text) as Record;
      const ips = r.ips.map((s) => IP.parse(s)).filter((ip): ip is IP => ip !== undefined);
      const parkedAt = Date.parse(r.parkedAt);
      const expiresAt = Date.parse(r.expiresAt);
      const strings = [r.namespace, r.name, r.containerID].every((v) => typeof v === 'string') && (r.ifname === null || typeof r.ifname === 'string');
      if (!strings || Number.isNaN(parkedAt) || Number.isNaN(expiresAt)) return undefined;
      return {
        pod: { namespace: r.namespace, name: r.name },
        attachment: r.ifname === null ? { containerId: r.containerID } : { containerId: r.containerID, ifname: r.ifname },
        ips,
        parkedAt,
        expiresAt,
      };
    } catch {
      return undefined;
    }
  }
}
