// Leases in etcd (its v3 API, through the JSON gateway: etcd-http.ts), in flannel's exact schema:
//   <prefix>/config                      the network config JSON
//   <prefix>/subnets/10.244.1.0-24       the lease JSON, attached to an etcd lease (TTL);
//                                        10.244.1.0-24&fd00:10:244:1::-64 dual stack,
//                                        fd00:10:244:1::-64 IPv6 only
// Loaded only by the daemon and the operator commands (dynamic import); the
// client itself only with --etcd-endpoints (a chunk of its own, build.mjs).
import { readFileSync } from 'node:fs';
import { Lease, LeaseAttrs, LeaseSubnets, decodeAttrs, encodeAttrs, leaseKey, parseLeaseKey, taken } from '../lease';
import { DEFAULT_PREFIX, LeaseStore, StoreOptions } from './store';
import { type LeaseDelta, type LeaseList, StoreUnavailable } from '../manager';
import { Serial } from '../../util/serial';
import { hasUserInfo, withoutUserInfo } from '../../util/url-text';
import { EtcdMirror } from './etcd-mirror';
import type { EtcdHttp, EtcdWatch } from './etcd-http';

/** The most an etcd call may take, retries included (StoreOptions.etcdTimeoutMs). */
const CALL_TIMEOUT_MS = 5000;
/** First delay before a failed or cancelled watch is made again (doubling to 30 s). */
const WATCH_RETRY_MS = 500;

/** The client's "cannot reach etcd right now" becomes StoreUnavailable (by name: the client is a chunk of its own). */
function unavailable(err: unknown): Error {
  if (err instanceof StoreUnavailable) return err;
  if ((err as Error)?.name === 'EtcdUnreachable') return new StoreUnavailable((err as Error).message);
  return err instanceof Error ? err : new Error(String(err));
}

export class EtcdStore implements LeaseStore {
  readonly description: string;
  /** etcd lease IDs we attached to our own keys, so a renewal can revoke the old one. */
  private readonly held = new Map<string, string>();
  /** The leases as last read and watched: while the watch runs, a list is answered from it. */
  private readonly mirror = new EtcdMirror((name, raw, permanent) => this.decode(name, raw, permanent));
  /** Writes that move our keys between etcd leases run one at a time (see exclusive()). */
  private readonly writes = new Serial();

  private constructor(
    private readonly client: EtcdHttp,
    private readonly prefix: string,
    private readonly endpoints: string,
    private readonly timeoutMs: number,
  ) {
    this.description = `etcd ${endpoints} ${prefix}`;
  }

  static async open(opts: StoreOptions): Promise<EtcdStore> {
    const hosts = (opts.etcdEndpoints ?? []).map((h) => h.trim()).filter(Boolean);
    for (const h of hosts) {
      if (hasUserInfo(h)) throw new Error(`--etcd-endpoints: ${JSON.stringify(withoutUserInfo(h))} must not carry a user or password (use --etcd-username and --etcd-password)`);
      if (!/^https?:\/\/[^/\s@]+\/?$/.test(h)) throw new Error(`--etcd-endpoints: ${JSON.stringify(withoutUserInfo(h))} is not an http(s)://host:port URL`);
    }
    const timeoutMs = opts.etcdTimeoutMs ?? CALL_TIMEOUT_MS;
    // TLS: a client certificate is presented whenever one is given, with or without
    // --etcd-cafile (without it, the server is checked against the system's CAs), as flanneld does.
    if (!!opts.etcdCertFile !== !!opts.etcdKeyFile) {
      throw new Error(`--etcd-certfile and --etcd-keyfile go together (the client certificate and its key); only ${opts.etcdCertFile ? '--etcd-certfile' : '--etcd-keyfile'} was given`);
    }
    const tls = {
      ...(opts.etcdCaFile ? { ca: readFileSync(opts.etcdCaFile) } : {}),
      ...(opts.etcdCertFile ? { cert: readFileSync(opts.etcdCertFile) } : {}),
      ...(opts.etcdKeyFile ? { key: readFileSync(opts.etcdKeyFile) } : {}),
    };
    const prefix = (opts.etcdPrefix ?? DEFAULT_PREFIX).replace(/\/+$/, '');
    if (!prefix.startsWith('/')) throw new Error(`--etcd-prefix must start with "/", got ${JSON.stringify(opts.etcdPrefix)}`);
    const { EtcdHttp } = await import('./etcd-http');
    const client = new EtcdHttp({
      endpoints: hosts.map((h) => h.replace(/\/$/, '')),
      timeoutMs,
      tls,
      ...(opts.etcdUsername ? { auth: { username: opts.etcdUsername, password: opts.etcdPassword ?? '' } } : {}),
    });
    return new EtcdStore(client, prefix, hosts.join(','), timeoutMs);
  }

  private key(subnets: LeaseSubnets): string {
    return `${this.prefix}/subnets/${leaseKey(subnets)}`;
  }

  /**
   * One store operation, bounded as a whole: a call may try several endpoints,
   * each up to `timeoutMs`, and a partition must not block the reconcile for
   * that long.
   */
  private async call<T>(fn: () => Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new StoreUnavailable(`etcd ${this.endpoints} unreachable: no answer within ${this.timeoutMs / 1000} s`)),
        this.timeoutMs,
      );
    });
    try {
      return await Promise.race([fn(), deadline]);
    } catch (err) {
      throw unavailable(err);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * One write of our keys at a time, each to its end (even past a caller's
   * deadline): interleaved, renewal A could revoke the etcd lease renewal B had
   * just moved the key to, which deletes the key.
   */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    return this.writes.run(fn);
  }

  getConfig(): Promise<string | undefined> {
    return this.call(async () => (await this.client.range(`${this.prefix}/config`)).kvs[0]?.value.toString());
  }

  async setConfig(text: string): Promise<void> {
    await this.call(() => this.client.put(`${this.prefix}/config`, text));
  }

  /** A key's name under <prefix>/subnets/. */
  private nameOf(key: Buffer): string {
    return key.toString().slice(this.prefix.length + '/subnets/'.length);
  }

  /** Every lease, read from etcd (a range read), and the etcd revision the list was read at. */
  private async listAt(): Promise<LeaseList & { revision: string }> {
    const { started, revision, kvs } = await this.readRange();
    return this.mirror.endRead(started, revision, kvs);
  }

  /** A range read of every lease (each key by its name), not yet given to the mirror. */
  private async readRange() {
    const started = this.mirror.beginRead();
    let res: { revision: string; kvs: import('./etcd-http').Kv[] };
    try {
      res = await this.call(() => this.client.range(`${this.prefix}/subnets/`, `${this.prefix}/subnets0`));
    } catch (err) {
      this.mirror.abortRead();
      throw err;
    }
    return { started, revision: res.revision, kvs: res.kvs.map((kv) => ({ name: this.nameOf(kv.key), kv })) };
  }

  /** One key and value as a lease, or why not. */
  private decode(name: string, raw: string, permanent: boolean): { lease?: Lease; why?: string } {
    const subnets = parseLeaseKey(name);
    if (!subnets) return { why: 'the key is not a subnet like 10.244.1.0-24 or 10.244.1.0-24&fd00:10:244:1::-64' };
    try {
      // lease "0": a key attached to no etcd lease, i.e. a flannel reservation
      return { lease: { ...subnets, attrs: decodeAttrs(raw), raw, ...(permanent ? { permanent } : {}) } };
    } catch (err) {
      return { why: (err as Error).message };
    }
  }

  /** From memory while the watch has told every change since a range read (etcd-mirror.ts), else a range read. */
  async list(): Promise<LeaseList> {
    return this.mirror.usable() ? this.mirror.list() : this.listAt();
  }

  /**
   * The changes since the last list or delta handed out (revision `since`),
   * from memory when it is usable, else after a range read; undefined when
   * `since` is not that one.
   */
  async changes(since: string): Promise<LeaseDelta | undefined> {
    if (!this.mirror.counts(since)) return undefined;
    if (!this.mirror.usable()) {
      const { started, revision, kvs } = await this.readRange();
      this.mirror.endRead(started, revision, kvs, false);
    }
    return this.mirror.changes(since);
  }

  private grant(ttlS: number): Promise<string> {
    return this.client.leaseGrant(ttlS);
  }

  private async revoke(id: string | undefined): Promise<void> {
    if (!id) return;
    try {
      await this.call(() => this.client.leaseRevoke(id));
    } catch {
      // already expired or revoked: nothing holds it
    }
  }

  /**
   * The key must not exist, no other key may hold one of our subnets, and no
   * lease may have been written since we looked (a compare over the whole
   * subnets/ range: mod_revision of every key ≤ the revision we read at, or
   * that of `chosenFrom`). Two
   * nodes picking different IPv4 but the same IPv6 subnet at the same moment
   * write different keys; this makes the second one fail and pick again.
   */
  async create(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number, chosenFrom?: LeaseList): Promise<boolean> {
    // the list the subnets were chosen from does as well as a new one: its revision guards the write
    const { leases, revision } = chosenFrom?.revision !== undefined ? { leases: chosenFrom.leases, revision: chosenFrom.revision } : await this.listAt();
    if ([subnets.subnet, subnets.ipv6Subnet].some((s) => s && taken(s, leases))) return false;
    return this.call(() => this.exclusive(async () => {
      // ttlS 0: a reservation, as renew writes it (attached to no etcd lease)
      const id = ttlS > 0 ? await this.grant(ttlS) : undefined;
      const key = this.key(subnets);
      const res = await this.client.txn(
        [
          { key, target: 'CREATE', result: 'EQUAL', createRevision: '0' },
          // '/' + 1: every key under subnets/
          { key: `${this.prefix}/subnets/`, rangeEnd: `${this.prefix}/subnets0`, target: 'MOD', result: 'LESS', modRevision: (BigInt(revision) + 1n).toString() },
        ],
        [{ key, value: encodeAttrs(attrs), lease: id }],
      );
      if (!res.succeeded) {
        await this.revoke(id);
        return false;
      }
      this.mirror.wrote(res.revision);
      if (id !== undefined) this.held.set(key, id);
      return true;
    }));
  }

  /** Guarded by the value exactly as stored (`expectedValue` is a Lease's `raw`, or what we wrote). */
  async renew(subnets: LeaseSubnets, attrs: LeaseAttrs, ttlS: number, expectedValue?: string): Promise<boolean> {
    return this.call(() => this.exclusive(async () => {
      // ttlS 0: a reservation, written as flannel keeps it, attached to no etcd lease
      const id = ttlS > 0 ? await this.grant(ttlS) : undefined;
      const key = this.key(subnets);
      const guard =
        expectedValue === undefined ? ({ key, target: 'CREATE', result: 'GREATER', createRevision: '0' } as const) : ({ key, target: 'VALUE', result: 'EQUAL', value: expectedValue } as const);
      const res = await this.client.txn([guard], [{ key, value: encodeAttrs(attrs), lease: id }]);
      if (!res.succeeded) {
        await this.revoke(id);
        return false;
      }
      this.mirror.wrote(res.revision);
      // The key now hangs on the new etcd lease (or none); the old one would only expire.
      await this.revoke(this.held.get(key));
      if (id !== undefined) this.held.set(key, id);
      else this.held.delete(key);
      return true;
    }));
  }

  async remove(subnets: LeaseSubnets): Promise<void> {
    const key = this.key(subnets);
    await this.call(() => this.exclusive(async () => {
      this.mirror.wrote(await this.client.delete(key));
      await this.revoke(this.held.get(key));
      this.held.delete(key);
    }));
  }

  /**
   * An etcd watch on <prefix>/subnets/ that never dies: the client attaches a
   * watch again after a disconnection by itself, but when etcd *cancels* it
   * (the revision it resumes from was compacted while we were away, ...) it
   * only emits 'error'. Then, and when creating it fails, a new one is made
   * from the current revision and `onChange` asks for a full resync: the list
   * that follows covers whatever was missed.
   */
  watch(onChange: (why: string) => void, onError: (err: Error) => void, after?: string): () => void {
    type Watcher = EtcdWatch;
    let stopped = false;
    let watcher: Watcher | undefined;
    let timer: NodeJS.Timeout | undefined;
    // from the revision after the caller's list: a change made between that list and now is replayed
    let from = after !== undefined ? (BigInt(after) + 1n).toString() : undefined;
    let resync = false;
    let delay = WATCH_RETRY_MS;
    const again = (why: Error) => {
      onError(why);
      from = undefined; // from now on: the resync's list covers the gap
      resync = true;
      if (stopped) return;
      timer = setTimeout(() => void start(), delay);
      timer.unref?.();
      delay = Math.min(delay * 2, 30_000);
    };
    const start = async (): Promise<void> => {
      if (stopped) return;
      let w: Watcher;
      try {
        w = await this.client.watch(`${this.prefix}/subnets/`, `${this.prefix}/subnets0`, from);
        this.mirror.watching(w, from);
      } catch (err) {
        again(unavailable(err));
        return;
      }
      if (stopped) {
        await w.cancel().catch(() => {});
        return;
      }
      watcher = w;
      delay = WATCH_RETRY_MS;
      // the key is whatever was written: quoted, it cannot break a log line
      w.on('put', (kv) => {
        this.mirror.event(w, this.nameOf(kv.key), kv, false);
        onChange(`etcd put ${JSON.stringify(kv.key.toString())}`);
      });
      w.on('delete', (kv) => {
        this.mirror.event(w, this.nameOf(kv.key), kv, true);
        onChange(`etcd delete ${JSON.stringify(kv.key.toString())}`);
      });
      w.on('connected', () => {
        this.mirror.reattached(w); // the next list reads the range once
        onChange('etcd watch (re)connected');
      });
      w.on('disconnected', (err) => {
        this.mirror.lost(w);
        onError(unavailable(err));
      });
      w.on('error', (err: Error) => {
        // cancelled by etcd: the watcher will not bring it back
        this.mirror.lost(w, true);
        w.removeAllListeners();
        w.on('error', () => {});
        if (watcher === w) watcher = undefined;
        again(new Error(`etcd ${this.endpoints} cancelled the watch (${err?.message ?? err}); watching again from now and re-reading every lease`));
      });
      if (resync) {
        resync = false;
        onChange('etcd watch recreated: full resync');
      }
    };
    void start();
    return () => {
      stopped = true;
      clearTimeout(timer);
      if (watcher) this.mirror.lost(watcher, true);
      void watcher?.cancel().catch(() => {});
    };
  }

  async close(): Promise<void> {
    this.client.close();
  }
}
