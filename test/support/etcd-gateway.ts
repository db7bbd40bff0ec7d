// A stand-in for etcd's v3 JSON gateway (the HTTP API src/flannel/store/etcd-http.ts speaks), in
// memory, for unit tests: keys with revisions, leases whose revocation deletes their keys,
// transactions with the compares the store sends, range reads, and watches that stream the
// changes as etcd does (created, events, cancelled). Knobs let a test hold a range read, delay
// answers, break or cancel the watch streams, refuse watches, and require a user's token.
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

interface Entry {
  value: string;
  lease: string;
  create: number;
  mod: number;
}

interface Watch {
  key: string;
  rangeEnd?: string;
  startRevision?: string;
  res: ServerResponse;
}

const b64 = (s: string) => Buffer.from(s).toString('base64');
const unb64 = (s: unknown) => Buffer.from(typeof s === 'string' ? s : '', 'base64').toString();

export class FakeEtcdGateway {
  readonly kv = new Map<string, Entry>();
  revision = 41;
  /** Range reads of more than one key (lists), and every transaction's request. */
  ranges = 0;
  readonly txns: { compare: Record<string, string>[]; success: unknown[] }[] = [];
  readonly revoked: string[] = [];
  readonly watches: Watch[] = [];
  /** Holds the next range reads until it settles (answered with the state they were asked at). */
  holdRead?: Promise<void>;
  /** How long each successive txn's answer takes to come back (applied at once, answered late). */
  readonly answerDelays: number[] = [];
  /** Watches asked for now are refused (the stream ends before creation). */
  refuseWatches = false;
  /** Revisions up to this one are compacted: a watch from one of them is created, then cancelled. */
  compacted = 0;
  /** With a user: every call but authenticate needs a token it handed out. */
  user?: { name: string; password: string };
  private readonly tokens = new Set<string>();
  /** Every change, for watches from a past revision. */
  private readonly history: { key: string; rev: number; event: unknown }[] = [];
  private nextLease = 1000;
  private readonly server = http.createServer((req, res) => void this.handle(req, res));

  async start(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    for (const w of this.watches) w.res.destroy();
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }

  /** A key written by someone else (a lease of another node): watches see it. */
  put(key: string, value: string, lease = '0'): void {
    const rev = ++this.revision;
    const old = this.kv.get(key);
    this.kv.set(key, { value, lease, create: old?.create ?? rev, mod: rev });
    this.notify(key, { kv: this.kvJson(key) });
  }

  delete(key: string): void {
    if (!this.kv.delete(key)) return;
    const rev = ++this.revision;
    this.notify(key, { type: 'DELETE', kv: { key: b64(key), mod_revision: String(rev) } });
  }

  /** Every watch stream broken (a connection lost). */
  dropWatches(): void {
    for (const w of this.watches.splice(0)) w.res.destroy();
  }

  /** Every watch cancelled by etcd, as when its revision was compacted. */
  cancelWatches(reason: string, compactRevision = '0'): void {
    for (const w of this.watches.splice(0)) {
      w.res.write(`${JSON.stringify({ result: { header: this.header(), canceled: true, compact_revision: compactRevision, cancel_reason: reason } })}\n`);
      w.res.end();
    }
  }

  /** Expires every token handed out (etcd restarted, or its token TTL passed). */
  expireTokens(): void {
    this.tokens.clear();
  }

  private header() {
    return { cluster_id: '1', member_id: '2', revision: String(this.revision), raft_term: '2' };
  }

  private kvJson(key: string) {
    const e = this.kv.get(key)!;
    return { key: b64(key), create_revision: String(e.create), mod_revision: String(e.mod), version: '1', value: b64(e.value), ...(e.lease !== '0' ? { lease: e.lease } : {}) };
  }

  private inRange(w: { key: string; rangeEnd?: string }, key: string): boolean {
    return w.rangeEnd === undefined ? key === w.key : key >= w.key && key < w.rangeEnd;
  }

  private notify(key: string, event: unknown): void {
    this.history.push({ key, rev: this.revision, event });
    for (const w of this.watches) if (this.inRange(w, key)) w.res.write(`${JSON.stringify({ result: { header: this.header(), events: [event] } })}\n`);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let text = '';
    for await (const c of req) text += c;
    const body = JSON.parse(text || '{}') as Record<string, unknown>;
    const json = (v: unknown, status = 200) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(v));
    };
    const error = (message: string, code: number, status = 400) => json({ error: message, message, code }, status);
    if (req.url === '/v3/auth/authenticate') {
      if (!this.user || body.name !== this.user.name || body.password !== this.user.password) return error('etcdserver: authentication failed, invalid user ID or password', 3);
      const token = `token-${this.tokens.size + 1}-${Date.now()}`;
      this.tokens.add(token);
      return json({ header: this.header(), token });
    }
    if (this.user && !this.tokens.has(String(req.headers.authorization))) return error('etcdserver: invalid auth token', 16, 401);
    switch (req.url) {
      case '/v3/kv/range': {
        const key = unb64(body.key);
        const rangeEnd = body.range_end === undefined ? undefined : unb64(body.range_end);
        if (rangeEnd !== undefined) this.ranges++;
        const header = this.header();
        const kvs = [...this.kv.keys()].filter((k) => this.inRange({ key, rangeEnd }, k)).sort().map((k) => this.kvJson(k));
        if (this.holdRead) await this.holdRead;
        return json({ header, ...(kvs.length ? { kvs, count: String(kvs.length) } : {}) });
      }
      case '/v3/kv/put': {
        this.put(unb64(body.key), unb64(body.value), typeof body.lease === 'string' ? body.lease : '0');
        return json({ header: this.header() });
      }
      case '/v3/kv/deleterange': {
        this.delete(unb64(body.key));
        return json({ header: this.header() });
      }
      case '/v3/kv/txn': {
        const compare = (body.compare as Record<string, string>[]) ?? [];
        this.txns.push({ compare, success: (body.success as unknown[]) ?? [] });
        const ok = compare.every((c) => this.holds(c));
        if (ok) for (const op of (body.success as { request_put: Record<string, string> }[]) ?? []) this.put(unb64(op.request_put.key), unb64(op.request_put.value), op.request_put.lease ?? '0');
        const header = this.header();
        const delay = this.answerDelays.shift() ?? 0;
        if (delay) await new Promise((r) => setTimeout(r, delay));
        return json({ header, ...(ok ? { succeeded: true } : {}) });
      }
      case '/v3/lease/grant':
        return json({ header: this.header(), ID: String(this.nextLease++), TTL: String(body.TTL) });
      case '/v3/lease/revoke': {
        const id = String(body.ID);
        this.revoked.push(id);
        for (const [k, e] of [...this.kv]) if (e.lease === id) this.delete(k);
        return json({ header: this.header() });
      }
      case '/v3/watch': {
        if (this.refuseWatches) return void res.destroy();
        const create = body.create_request as Record<string, string>;
        const w: Watch = { key: unb64(create.key), rangeEnd: create.range_end === undefined ? undefined : unb64(create.range_end), startRevision: create.start_revision, res };
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write(`${JSON.stringify({ result: { header: this.header(), created: true } })}\n`);
        if (w.startRevision !== undefined && Number(w.startRevision) <= this.compacted) {
          res.end(`${JSON.stringify({ result: { header: this.header(), canceled: true, compact_revision: String(this.compacted), cancel_reason: 'etcdserver: mvcc: required revision has been compacted' } })}\n`);
          return;
        }
        // from a past revision: what happened since first, as etcd replays it
        const replay = w.startRevision === undefined ? [] : this.history.filter((h) => h.rev >= Number(w.startRevision) && this.inRange(w, h.key));
        if (replay.length) res.write(`${JSON.stringify({ result: { header: this.header(), events: replay.map((h) => h.event) } })}\n`);
        this.watches.push(w);
        res.on('close', () => {
          const at = this.watches.indexOf(w);
          if (at >= 0) this.watches.splice(at, 1);
        });
        return;
      }
      default:
        return json({ code: 5, message: 'Not Found' }, 404);
    }
  }

  /** One compare of a transaction, as etcd judges it. */
  private holds(c: Record<string, string>): boolean {
    const key = unb64(c.key);
    const keys = c.range_end === undefined ? [key] : [...this.kv.keys()].filter((k) => this.inRange({ key, rangeEnd: unb64(c.range_end) }, k));
    const cmp = (a: number | string, b: number | string) =>
      c.result === 'EQUAL' ? a === b : c.result === 'NOT_EQUAL' ? a !== b : c.result === 'GREATER' ? a > b : a < b;
    return keys.every((k) => {
      const e = this.kv.get(k);
      if (c.target === 'CREATE') return cmp(e?.create ?? 0, Number(c.create_revision ?? 0));
      if (c.target === 'MOD') return cmp(e?.mod ?? 0, Number(c.mod_revision ?? 0));
      return e !== undefined && cmp(e.value, unb64(c.value));
    });
  }
}
