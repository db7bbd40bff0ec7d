// One network's addresses: the Go-format store, our attachment index and the
// lock that serialises every call on the network, put together.
import * as fs from 'node:fs';
import { join } from 'node:path';
import { IP } from '../net/ip';
import { DiskStore, Owner, ownerEquals } from './disk';
import { AttachmentIndex, StaleIndexError } from './index';
import { withLock } from '../util/lock';
import { ensureDir } from '../util/fs';

/** Our own per-network state sits under a name no network can have (names never start with '.'). */
export const META_DIR = '.cni-ts';

export interface LockOptions {
  /** Create the network's directory if it does not exist (ADD); otherwise a missing one means "nothing held". */
  create: boolean;
  timeoutMs: number;
}

export class NetworkPool {
  readonly store: DiskStore;
  readonly index: AttachmentIndex;
  private readonly metaDir: string;

  constructor(dataDir: string, network: string) {
    this.metaDir = join(dataDir, META_DIR, network);
    this.store = new DiskStore(dataDir, network, this.metaDir);
    this.index = new AttachmentIndex(this.metaDir, this.store);
  }

  /** Runs `fn` holding the network's lock; undefined when there is no state and `create` is false. */
  async locked<T>(opts: LockOptions, fn: () => Promise<T> | T): Promise<T | undefined> {
    if (!opts.create && !this.store.exists()) return undefined;
    ensureDir(this.metaDir);
    if (opts.create) this.store.create();
    return withLock(this.store.dir, join(this.metaDir, 'lock'), opts.timeoutMs, async () => {
      if (!this.store.exists()) return undefined; // removed while we waited
      this.store.discardStaged(); // a call killed mid-ADD may have left one
      try {
        await this.index.open();
        try {
          return await fn();
        } catch (err) {
          if (!(err instanceof StaleIndexError)) throw err;
          process.stderr.write(`host-local: ${err.message}; rebuilding the index\n`);
          await this.index.rebuild(await this.store.scan());
          return await fn();
        }
      } finally {
        this.store.discardStaged();
      }
    });
  }

  /** Why state cannot be written here (STATUS), or undefined when it can: a real write, not a permission guess. */
  probeWritable(): string | undefined {
    const probe = join(this.metaDir, `status-probe.${process.pid}`);
    try {
      ensureDir(this.metaDir);
      fs.writeFileSync(probe, 'ok', { mode: 0o600 });
      fs.unlinkSync(probe);
      return undefined;
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      return `cannot write state under ${this.metaDir}: ${e.code ?? e.message}`;
    }
  }

  /** What `owner` holds, each address checked against its file (the index is only a hint). */
  heldBy(owner: Owner): IP[] {
    return this.index.get(owner).filter((ip) => {
      const holder = this.store.ownerOf(ip);
      return !!holder && ownerEquals(holder, owner);
    });
  }

  /**
   * Releases what (containerID, ifname) holds. Like the reference, legacy files
   * holding only the container ID are released when nothing else matched.
   */
  release(owner: Owner): IP[] {
    let key: Owner = owner;
    let ips = this.heldBy(key);
    if (ips.length === 0) {
      key = { containerId: owner.containerId };
      ips = this.heldBy(key);
    }
    if (ips.length === 0) return [];
    this.index.invalidate();
    for (const ip of ips) this.store.release(ip);
    this.index.set(key, []);
    this.index.stamp();
    return ips;
  }
}
