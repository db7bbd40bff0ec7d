// A stand-in kube-apiserver for tests: Nodes only, over real HTTP(S), with the
// semantics a Node informer and kubectl rely on (facts from the Kubernetes API
// docs, "API concepts", and kube-apiserver's node strategy):
//
// - list, get, create, update (PUT), delete, and PATCH in the three formats
//   (kube-patch.ts), on /api/v1/nodes[/NAME] and the status subresource
//   /api/v1/nodes/NAME/status. As in kube-apiserver, a write to the Node keeps
//   its old status and a write to /status keeps its old spec; metadata
//   (annotations, labels) changes through both (flanneld patches its
//   annotations through /status). A write that changes nothing is no write.
// - one resourceVersion counter for the whole server, bumped by every write;
//   a given metadata.resourceVersion in an update or patch is a precondition
//   (409 Conflict).
// - watch (?watch=1): newline-separated JSON events ADDED, MODIFIED, DELETED,
//   BOOKMARK (allowWatchBookmarks=true) and ERROR on a chunked 200 response;
//   from resourceVersion unset or "0" it starts with an ADDED per Node, from
//   N it replays the changes after N from a bounded history; an N older than
//   the history is answered, as kube-apiserver answers it, by an ERROR event
//   holding a 410 Expired Status. timeoutSeconds ends the stream.
//   labelSelector and fieldSelector (metadata.name, spec.unschedulable) work
//   for list and watch; a Node that stops matching a watch's selector is
//   DELETED for it, one that starts matching is ADDED.
// - paged lists (?limit=N, then ?continue=TOKEN): every page is the list as
//   it was at the first page's resourceVersion (rebuilt from the watch
//   history), which each page carries; metadata.continue is set while more
//   remain (with remainingItemCount when there is no selector). A token whose
//   resourceVersion fell out of the history (etcd compacted it) is answered
//   410 Expired, with a token for the inconsistent remainder in the Status's
//   metadata.continue, as kube-apiserver answers it; so is the next one after
//   the expireContinueTokens hook.
// - server-side Table output (Accept: ...;as=Table;g=meta.k8s.io) for list,
//   get and watch, with kubectl's node columns; discovery (/version, /api,
//   /api/v1, /apis) and legacy JSON errors (Status objects).
// - authentication: bearer tokens and, over TLS, client certificates signed
//   by `clientCA` (the user is the CN); users have a role: "admin" (anything)
//   or "flannel" (kube-flannel's ClusterRole: get/list/watch nodes, patch
//   nodes/status, get pods). Every client is treated alike: kubectl, our
//   client, curl.
// - Pods: only GET /api/v1/namespaces/NS/pods/NAME, of pods a test made with
//   createPod (flanneld finds its node from its own pod when NODE_NAME is
//   not set).
//
// Test hooks (KubeApiHooks) run in-process, or through the control socket (a
// unix socket: reachable from any network namespace, which matters when the
// server runs inside one, see kube-apiserver-process.ts). The control socket
// also serves the API itself without authentication.
//
// Not modelled: other resources, server-side apply, protobuf, dry-run, managedFields, finalizers/graceful
// deletion, watch-list (sendInitialEvents).
import { randomUUID } from 'node:crypto';
import { chmodSync, rmSync } from 'node:fs';
import http, { IncomingMessage, ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { Json, JsonObject, PatchError, isObject, jsonPatch, mergePatch, strategicMergePatch } from './kube-patch';

export type { Json, JsonObject } from './kube-patch';

export type Role = 'admin' | 'flannel';

export interface KubeUser {
  name: string;
  /** Its bearer token; users without one authenticate by client certificate (CN = name). */
  token?: string;
  role: Role;
}

export interface KubeApiServerOptions {
  /** Where to listen; default 127.0.0.1 and a free port. */
  host?: string;
  port?: number;
  /** Serve HTTPS with this certificate; `clientCA` (PEM) verifies client certificates. */
  tls?: { cert: string; key: string; clientCA?: string };
  /** Who may call. Without users and without a client CA, anyone may (plain test servers). */
  users?: KubeUser[];
  /** How many Node events the watch history keeps (kube-apiserver's watch cache holds the last ~100 per type by default). */
  historyLimit?: number;
  /** How often a watch that allows bookmarks gets one (kube-apiserver: about a minute). */
  bookmarkIntervalMs?: number;
  /** A unix socket for the test hooks and unauthenticated API access. */
  controlSocket?: string;
}

export interface RequestRecord {
  method: string;
  path: string;
  query: Record<string, string>;
  user?: string;
  contentType?: string;
  accept?: string;
  userAgent?: string;
  /** The response's status code (a watch: 200 when its stream began). */
  status?: number;
  /** Over the control socket (the tests' own calls). */
  control?: boolean;
}

/** A Node as stored: plain JSON, loosely typed for the tests' convenience. */
export type StoredNode = { metadata: { name: string; [key: string]: any }; [key: string]: any };

/** What a test can do to the server besides calling its API; in-process and over the control socket alike. */
export interface KubeApiHooks {
  /** Stores a Pod (metadata.namespace and metadata.name), for GET only. */
  createPod(pod: JsonObject): Promise<void>;
  /** Creates a Node as it is given (status included), as the API does; returns it as stored. */
  createNode(node: JsonObject): Promise<StoredNode>;
  getNode(name: string): Promise<StoredNode | undefined>;
  listNodes(): Promise<StoredNode[]>;
  /** A JSON merge patch of the whole Node (spec, status, metadata), as another component would write it. */
  patchNode(name: string, patch: Json): Promise<StoredNode>;
  deleteNode(name: string): Promise<boolean>;
  /** The next watch (or the next `times` watches) that starts from a resourceVersion (not unset or "0") gets 410 Expired. */
  /**
   * `from` (client addresses): each of them gets 410 on its own next watch
   * from a resourceVersion, whoever else reconnects first (a shared count
   * can be used up by one fast client).
   */
  forceGone(times?: number, from?: string[]): Promise<void>;
  /** Breaks every open watch stream (the connection is destroyed, no clean end); returns how many. */
  dropWatches(): Promise<number>;
  /** Sends a BOOKMARK to every watch that allows them, now; returns how many. */
  sendBookmarks(): Promise<number>;
  /** Writes `count` times to "other resources": the resourceVersion moves on, no Node changes. Returns the new one. */
  bumpResourceVersion(count?: number): Promise<string>;
  /** The next `times` list requests with a continue token get 410 Expired (their snapshot "compacted"). */
  expireContinueTokens(times?: number): Promise<void>;
  /** Replaces the users (token rotation). */
  setUsers(users: KubeUser[]): Promise<void>;
  requests(): Promise<RequestRecord[]>;
  clearRequests(): Promise<void>;
  openWatches(): Promise<number>;
  /** A broken or hostile server: writes `text` as it is to every open watch stream; returns how many. */
  sendRawWatchText(text: string): Promise<number>;
  /**
   * A broken or hostile server: the next list of Nodes is answered 200 with a
   * body of `bytes` bytes (one Node with a huge annotation), written in 1 MiB
   * pieces until it is all sent or the client closes the connection.
   */
  oversizeNextList(bytes: number): Promise<void>;
  /** What the oversized answer came to: bytes written, and whether the client closed before its end. */
  oversizedListResult(): Promise<{ written: number; closedByClient: boolean } | undefined>;
}

export const HOOK_NAMES: readonly (keyof KubeApiHooks)[] = [
  'createPod', 'createNode', 'getNode', 'listNodes', 'patchNode', 'deleteNode', 'forceGone', 'dropWatches',
  'sendBookmarks', 'bumpResourceVersion', 'expireContinueTokens', 'setUsers', 'requests', 'clearRequests', 'openWatches',
  'sendRawWatchText', 'oversizeNextList', 'oversizedListResult',
];

/** An API error: answered as a Status object. */
class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: JsonObject,
    /** The Status's metadata (410 Expired for a continue token: the token for the rest). */
    readonly metadata?: JsonObject,
  ) {
    super(message);
  }
}

const statusObject = (code: number, reason: string, message: string, details?: JsonObject, metadata: JsonObject = {}): JsonObject => ({
  kind: 'Status',
  apiVersion: 'v1',
  metadata,
  status: 'Failure',
  message,
  reason,
  ...(details ? { details } : {}),
  code,
});

const notFound = (name: string) => new ApiError(404, 'NotFound', `nodes "${name}" not found`, { name, kind: 'nodes' });
const conflict = (name: string) =>
  new ApiError(409, 'Conflict', `Operation cannot be fulfilled on nodes "${name}": the object has been modified; please apply your changes to the latest version and try again`, { name, kind: 'nodes' });

/** What kube-apiserver shows anyone (system:public-info-viewer). */
const PUBLIC_PATHS = new Set(['/version', '/healthz', '/livez', '/readyz']);

type Verb = 'get' | 'list' | 'watch' | 'create' | 'update' | 'patch' | 'delete';

/** kube-flannel's ClusterRole, as far as Nodes go. */
const FLANNEL_ROLE: Record<string, Verb[]> = { pods: ['get'], nodes: ['get', 'list', 'watch'], 'nodes/status': ['patch'] };

// ---- selectors -------------------------------------------------------------

type Requirement = { key: string; op: '=' | '!=' | 'in' | 'notin' | 'exists' | '!'; values: string[] };

function splitTopLevel(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let cur = '';
  for (const c of text) {
    if (c === '(') depth++;
    if (c === ')') depth--;
    if (c === ',' && depth === 0) {
      parts.push(cur);
      cur = '';
    } else cur += c;
  }
  if (cur.trim()) parts.push(cur);
  return parts.map((p) => p.trim()).filter(Boolean);
}

function parseLabelSelector(text: string | undefined): Requirement[] {
  if (!text) return [];
  return splitTopLevel(text).map((part) => {
    let m = /^(\S+?)\s*(==|=|!=)\s*(\S*)$/.exec(part);
    if (m) return { key: m[1], op: m[2] === '!=' ? '!=' : '=', values: [m[3]] };
    m = /^(\S+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(part);
    if (m) return { key: m[1], op: m[2] as 'in' | 'notin', values: m[3].split(',').map((v) => v.trim()) };
    if (/^!\S+$/.test(part)) return { key: part.slice(1), op: '!', values: [] };
    if (/^\S+$/.test(part)) return { key: part, op: 'exists', values: [] };
    throw new ApiError(400, 'BadRequest', `unable to parse requirement: ${JSON.stringify(part)}`);
  });
}

const FIELDS = new Set(['metadata.name', 'spec.unschedulable']);

function parseFieldSelector(text: string | undefined): Requirement[] {
  if (!text) return [];
  return splitTopLevel(text).map((part) => {
    const m = /^([^=!]+?)\s*(==|=|!=)\s*(.*)$/.exec(part);
    if (!m) throw new ApiError(400, 'BadRequest', `invalid field selector: ${JSON.stringify(part)}`);
    if (!FIELDS.has(m[1])) throw new ApiError(400, 'BadRequest', `field label not supported: ${m[1]}`);
    return { key: m[1], op: m[2] === '!=' ? '!=' : '=', values: [m[3]] };
  });
}

function matches(reqs: Requirement[], get: (key: string) => string | undefined): boolean {
  return reqs.every(({ key, op, values }) => {
    const v = get(key);
    switch (op) {
      case '=':
        return v === values[0];
      case '!=':
        return v !== values[0];
      case 'in':
        return v !== undefined && values.includes(v);
      case 'notin':
        return v === undefined || !values.includes(v);
      case 'exists':
        return v !== undefined;
      case '!':
        return v === undefined;
    }
  });
}

interface Selector {
  labels: Requirement[];
  fields: Requirement[];
}

function selects(sel: Selector, node: JsonObject): boolean {
  const meta = node.metadata as JsonObject;
  const labels = (meta.labels ?? {}) as Record<string, string>;
  const field = (k: string) => (k === 'metadata.name' ? String(meta.name) : String((node.spec as JsonObject)?.unschedulable === true));
  return matches(sel.labels, (k) => labels[k]) && matches(sel.fields, field);
}

// ---- kubectl's node table ----------------------------------------------------

const NODE_COLUMNS = [
  { name: 'Name', type: 'string', format: 'name', description: 'Name must be unique within a namespace.', priority: 0 },
  { name: 'Status', type: 'string', format: '', description: 'The status of the node', priority: 0 },
  { name: 'Roles', type: 'string', format: '', description: 'The roles of the node', priority: 0 },
  { name: 'Age', type: 'string', format: '', description: 'CreationTimestamp is a timestamp representing the server time when this object was created.', priority: 0 },
  { name: 'Version', type: 'string', format: '', description: 'Kubelet Version reported by the node.', priority: 0 },
  { name: 'Internal-IP', type: 'string', format: '', description: 'List of internal IPs.', priority: 1 },
  { name: 'External-IP', type: 'string', format: '', description: 'List of external IPs.', priority: 1 },
];

/** k8s.io/apimachinery's duration.HumanDuration, to the day. */
function humanAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 ? `${m}m${s % 60}s` : `${m}m`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 8) return m % 60 ? `${h}h${m % 60}m` : `${h}h`;
  if (h < 48) return `${h}h`;
  const d = Math.floor(h / 24);
  return d < 8 && h % 24 ? `${d}d${h % 24}h` : `${d}d`;
}

function nodeRow(node: JsonObject): JsonObject {
  const meta = node.metadata as JsonObject;
  const status = (node.status ?? {}) as JsonObject;
  const conditions = (Array.isArray(status.conditions) ? status.conditions : []) as JsonObject[];
  const ready = conditions.find((c) => c.type === 'Ready');
  let state = !ready ? 'Unknown' : ready.status === 'True' ? 'Ready' : 'NotReady';
  if ((node.spec as JsonObject)?.unschedulable === true) state += ',SchedulingDisabled';
  const labels = (meta.labels ?? {}) as Record<string, string>;
  const roles = Object.keys(labels).filter((k) => k.startsWith('node-role.kubernetes.io/')).map((k) => k.slice('node-role.kubernetes.io/'.length));
  if (labels['kubernetes.io/role']) roles.push(labels['kubernetes.io/role']);
  const addresses = (Array.isArray(status.addresses) ? status.addresses : []) as JsonObject[];
  const ip = (type: string) => addresses.filter((a) => a.type === type).map((a) => a.address).join(',') || '<none>';
  return {
    cells: [
      meta.name,
      state,
      roles.length ? roles.sort().join(',') : '<none>',
      humanAge(Date.now() - Date.parse(String(meta.creationTimestamp))),
      String((status.nodeInfo as JsonObject | undefined)?.kubeletVersion ?? ''),
      ip('InternalIP'),
      ip('ExternalIP'),
    ],
    object: { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: structuredClone(meta) },
  };
}

function table(nodes: JsonObject[], resourceVersion: string | undefined, withColumns = true): JsonObject {
  return {
    kind: 'Table',
    apiVersion: 'meta.k8s.io/v1',
    metadata: resourceVersion ? { resourceVersion } : {},
    ...(withColumns ? { columnDefinitions: NODE_COLUMNS } : {}),
    rows: nodes.map(nodeRow),
  };
}

const wantsTable = (req: IncomingMessage) => /as=Table/.test(req.headers.accept ?? '') && /g=meta\.k8s\.io/.test(req.headers.accept ?? '');

// ---- the server ----------------------------------------------------------------

interface Change {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** The Node after the change (DELETED: as it was, with the deletion's resourceVersion). */
  object: JsonObject;
  previous?: JsonObject;
}

interface Watch {
  res: ServerResponse;
  selector: Selector;
  table: boolean;
  bookmarks: boolean;
  columnsSent: boolean;
  timers: NodeJS.Timeout[];
}

const NAME_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export class KubeApiServer implements KubeApiHooks {
  private readonly nodes = new Map<string, JsonObject>();
  /** The names in key order; undefined after a create or delete. */
  private sortedNames?: string[];
  /** By "namespace/name". */
  private readonly pods = new Map<string, JsonObject>();
  private rv = 1;
  private readonly history: Change[] = [];
  /** The newest resourceVersion whose change fell out of the history: a watch must start at or after it. */
  private evictedThrough = 0;
  private readonly watches = new Set<Watch>();
  /** How many of the next watches from a resourceVersion get 410 (forceGone). */
  private gonePending = 0;
  /** How many of the next lists with a continue token get 410 Expired (expireContinueTokens). */
  private continueExpiries = 0;
  /** The size of the next list's oversized answer (oversizeNextList), and what became of the last one. */
  private oversizeBytes = 0;
  private oversized?: { written: number; closedByClient: boolean };
  /** Client addresses whose next watch from a resourceVersion gets 410 (forceGone's `from`). */
  private readonly goneFor = new Set<string>();
  private users: KubeUser[];
  private readonly log: RequestRecord[] = [];
  private readonly servers: (http.Server | https.Server)[] = [];
  private readonly historyLimit: number;
  private readonly bookmarkIntervalMs: number;
  /** The API's URL, e.g. https://127.0.0.1:40123. */
  url = '';

  constructor(private readonly opts: KubeApiServerOptions = {}) {
    this.users = opts.users ?? [];
    this.historyLimit = opts.historyLimit ?? 100;
    this.bookmarkIntervalMs = opts.bookmarkIntervalMs ?? 60_000;
  }

  async start(): Promise<this> {
    const api = this.opts.tls
      ? https.createServer({ cert: this.opts.tls.cert, key: this.opts.tls.key, ca: this.opts.tls.clientCA, requestCert: !!this.opts.tls.clientCA, rejectUnauthorized: false }, (req, res) =>
          this.handle(req, res, false),
        )
      : http.createServer((req, res) => this.handle(req, res, false));
    const host = this.opts.host ?? '127.0.0.1';
    await listen(api, { host, port: this.opts.port ?? 0 });
    this.servers.push(api);
    const port = (api.address() as AddressInfo).port;
    this.url = `${this.opts.tls ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${port}`;
    if (this.opts.controlSocket) {
      rmSync(this.opts.controlSocket, { force: true });
      const control = http.createServer((req, res) => this.handle(req, res, true));
      await listen(control, { path: this.opts.controlSocket });
      chmodSync(this.opts.controlSocket, 0o600);
      this.servers.push(control);
    }
    return this;
  }

  async stop(): Promise<void> {
    for (const w of this.watches) this.endWatch(w);
    await Promise.all(
      this.servers.map((s) => {
        s.closeAllConnections();
        return new Promise<void>((r) => s.close(() => r()));
      }),
    );
  }

  // ---- hooks ----

  async createPod(pod: JsonObject): Promise<void> {
    const meta = pod.metadata as JsonObject;
    this.pods.set(`${String(meta.namespace)}/${String(meta.name)}`, structuredClone(pod));
  }
  async createNode(node: JsonObject): Promise<StoredNode> {
    return this.create(node) as StoredNode;
  }
  async getNode(name: string): Promise<StoredNode | undefined> {
    const n = this.nodes.get(name);
    return n && (structuredClone(n) as StoredNode);
  }
  async listNodes(): Promise<StoredNode[]> {
    return this.sorted().map((n) => structuredClone(n) as StoredNode);
  }
  async patchNode(name: string, patch: Json): Promise<StoredNode> {
    const cur = this.nodes.get(name);
    if (!cur) throw notFound(name);
    return this.save(name, mergePatch(cur, patch) as JsonObject) as StoredNode;
  }
  async deleteNode(name: string): Promise<boolean> {
    if (!this.nodes.has(name)) return false;
    this.remove(name);
    return true;
  }
  async forceGone(times = 1, from?: string[]): Promise<void> {
    if (from) for (const a of from) this.goneFor.add(a);
    else this.gonePending = times;
  }
  async expireContinueTokens(times = 1): Promise<void> {
    this.continueExpiries = times;
  }
  async dropWatches(): Promise<number> {
    const n = this.watches.size;
    for (const w of [...this.watches]) {
      this.forget(w);
      w.res.destroy();
    }
    return n;
  }
  async sendBookmarks(): Promise<number> {
    const allowed = [...this.watches].filter((w) => w.bookmarks && !w.table);
    for (const w of allowed) this.bookmark(w);
    return allowed.length;
  }
  async bumpResourceVersion(count = 1): Promise<string> {
    this.rv += count;
    return String(this.rv);
  }
  async setUsers(users: KubeUser[]): Promise<void> {
    this.users = users;
  }
  async requests(): Promise<RequestRecord[]> {
    return structuredClone(this.log);
  }
  async clearRequests(): Promise<void> {
    this.log.length = 0;
  }
  async openWatches(): Promise<number> {
    return this.watches.size;
  }
  async sendRawWatchText(text: string): Promise<number> {
    for (const w of this.watches) w.res.write(text);
    return this.watches.size;
  }
  async oversizeNextList(bytes: number): Promise<void> {
    this.oversizeBytes = bytes;
  }
  async oversizedListResult(): Promise<{ written: number; closedByClient: boolean } | undefined> {
    return this.oversized && { ...this.oversized };
  }

  // ---- storage ----

  /** The Nodes in etcd's key order (byte order of the names): the order lists and their pages follow. */
  private sorted(nodes?: Iterable<JsonObject>): JsonObject[] {
    if (nodes) return [...nodes].sort((a, b) => byteOrder(nameOf(a), nameOf(b)));
    // the names' order is kept between creates and deletes: a list of thousands is paged without sorting them each time
    this.sortedNames ??= [...this.nodes.keys()].sort(byteOrder);
    return this.sortedNames.map((n) => this.nodes.get(n)!);
  }

  /** The Nodes as they were at resourceVersion `rv` (at or after evictedThrough): the current ones with the later changes undone. */
  private nodesAt(rv: number): Iterable<JsonObject> {
    if (rv >= this.rv) return this.nodes.values();
    const at = new Map(this.nodes);
    for (let i = this.history.length - 1; i >= 0 && this.history[i].rv > rv; i--) {
      const c = this.history[i];
      if (c.type === 'ADDED') at.delete(nameOf(c.object));
      else at.set(nameOf(c.object), c.previous!);
    }
    return at.values();
  }

  /**
   * One page of a list (kube-apiserver's limit/continue): without a continue
   * token, the first `limit` Nodes now; with one, the next `limit` after its
   * key as they were at its resourceVersion. Every page carries that
   * resourceVersion; metadata.continue is set while more remain.
   */
  private listPage(q: URLSearchParams, selector: Selector): { items: JsonObject[]; metadata: JsonObject } {
    const limitText = q.get('limit');
    const limit = limitText ? Number(limitText) : 0;
    if (limitText && !Number.isSafeInteger(limit)) throw new ApiError(400, 'BadRequest', `limit: Invalid value: ${JSON.stringify(limitText)}`);
    const token = q.get('continue');
    let rv = this.rv;
    let after: string | undefined;
    if (token) {
      if (q.get('resourceVersion')) throw new ApiError(400, 'BadRequest', 'specifying resource version is not allowed when using continue');
      const t = decodeContinue(token);
      if (this.continueExpiries > 0 || t.rv < this.evictedThrough) {
        this.continueExpiries = Math.max(0, this.continueExpiries - 1);
        throw new ApiError(
          410,
          'Expired',
          'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.',
          undefined,
          { continue: encodeContinue(this.rv, t.start) },
        );
      }
      [rv, after] = [t.rv, t.start];
    }
    const all = rv >= this.rv ? this.sorted() : this.sorted(this.nodesAt(rv));
    // the first Node after the token's key, found by bisection: paging through thousands stays linear
    let lo = 0;
    for (let hi = all.length; after !== undefined && lo < hi; ) {
      const mid = (lo + hi) >> 1;
      if (byteOrder(nameOf(all[mid]), after) > 0) hi = mid;
      else lo = mid + 1;
    }
    const plain = !selector.labels.length && !selector.fields.length;
    const items: JsonObject[] = [];
    let i = lo;
    for (; i < all.length && (limit <= 0 || items.length < limit); i++) if (plain || selects(selector, all[i])) items.push(all[i]);
    const remaining = plain ? all.length - i : all.slice(i).filter((n) => selects(selector, n)).length;
    const metadata: JsonObject = { resourceVersion: String(rv) };
    if (remaining > 0) {
      metadata.continue = encodeContinue(rv, nameOf(items[items.length - 1]));
      if (plain) metadata.remainingItemCount = remaining;
    }
    return { items, metadata };
  }

  private create(input: Json): JsonObject {
    if (!isObject(input) || !isObject(input.metadata)) throw new ApiError(400, 'BadRequest', 'the body must be a Node object');
    const name = input.metadata.name;
    if (typeof name !== 'string' || !NAME_RE.test(name) || name.length > 253) {
      throw new ApiError(422, 'Invalid', `Node "${String(name)}" is invalid: metadata.name: Invalid value: ${JSON.stringify(name)}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'`, { name: String(name), kind: 'Node' });
    }
    if (this.nodes.has(name)) throw new ApiError(409, 'AlreadyExists', `nodes "${name}" already exists`, { name, kind: 'nodes' });
    const node: JsonObject = {
      ...structuredClone(input),
      kind: 'Node',
      apiVersion: 'v1',
      metadata: { ...structuredClone(input.metadata), uid: randomUUID(), creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z') },
      spec: isObject(input.spec) ? structuredClone(input.spec) : {},
      status: isObject(input.status) ? structuredClone(input.status) : {},
    };
    delete (node.metadata as JsonObject).resourceVersion;
    this.nodes.set(name, node);
    this.sortedNames = undefined;
    this.record('ADDED', node);
    return structuredClone(node);
  }

  /** Stores `next` as Node `name` unless nothing changed; the identity fields stay the server's. */
  private save(name: string, next: JsonObject): JsonObject {
    const cur = this.nodes.get(name)!;
    const curMeta = cur.metadata as JsonObject;
    next.kind = 'Node';
    next.apiVersion = 'v1';
    const meta = { ...(isObject(next.metadata) ? next.metadata : {}), name, uid: curMeta.uid, creationTimestamp: curMeta.creationTimestamp, resourceVersion: curMeta.resourceVersion };
    next.metadata = meta;
    if (JSON.stringify(next) === JSON.stringify(cur)) return structuredClone(cur);
    this.nodes.set(name, next);
    this.record('MODIFIED', next, cur);
    return structuredClone(next);
  }

  private remove(name: string): JsonObject {
    const cur = this.nodes.get(name)!;
    this.nodes.delete(name);
    this.sortedNames = undefined;
    const gone = structuredClone(cur);
    this.record('DELETED', gone, cur);
    return gone;
  }

  /** A write: the next resourceVersion, into the history and out to the watches. */
  private record(type: Change['type'], object: JsonObject, previous?: JsonObject): void {
    this.rv++;
    (object.metadata as JsonObject).resourceVersion = String(this.rv);
    const change: Change = { rv: this.rv, type, object: structuredClone(object), previous: previous && structuredClone(previous) };
    this.history.push(change);
    while (this.history.length > this.historyLimit) this.evictedThrough = this.history.shift()!.rv;
    for (const w of this.watches) this.deliver(w, change);
  }

  // ---- HTTP ----

  private async handle(req: IncomingMessage, res: ServerResponse, control: boolean): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    const record: RequestRecord = {
      method: req.method ?? 'GET',
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      contentType: req.headers['content-type'],
      accept: req.headers.accept,
      userAgent: req.headers['user-agent'],
      ...(control ? { control: true } : {}),
    };
    this.log.push(record);
    res.on('close', () => (record.status = res.statusCode));
    try {
      if (control && url.pathname.startsWith('/_test/')) return await this.hook(req, res, url.pathname.slice('/_test/'.length));
      const user = control || PUBLIC_PATHS.has(url.pathname) ? undefined : this.authenticate(req);
      if (user) record.user = user.name;
      await this.route(req, res, url, user);
      if (res.headersSent) record.status = res.statusCode; // a watch: its stream has begun
    } catch (err) {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      const e = err instanceof ApiError ? err : err instanceof PatchError ? new ApiError(err.code, err.code === 400 ? 'BadRequest' : 'Invalid', err.message) : new ApiError(500, 'InternalError', String(err));
      send(res, e.code, statusObject(e.code, e.reason, e.message, e.details, e.metadata));
    }
  }

  /** The caller (undefined: nobody configured, anyone may call); 401 for a wrong or missing credential. */
  private authenticate(req: IncomingMessage): KubeUser | undefined {
    const open = this.users.length === 0 && !this.opts.tls?.clientCA;
    const auth = req.headers.authorization;
    if (auth) {
      const m = /^Bearer (.+)$/i.exec(auth);
      const user = m ? this.users.find((u) => u.token === m[1].trim()) : undefined;
      if (user) return user;
      throw new ApiError(401, 'Unauthorized', 'Unauthorized');
    }
    const socket = req.socket as TLSSocket;
    if (this.opts.tls?.clientCA && socket.authorized) {
      const cn = socket.getPeerCertificate().subject?.CN;
      const name = Array.isArray(cn) ? cn[0] : cn;
      if (name) return this.users.find((u) => u.name === name) ?? { name, role: 'admin' };
    }
    if (open) return undefined;
    throw new ApiError(401, 'Unauthorized', 'Unauthorized');
  }

  private authorize(user: KubeUser | undefined, verb: Verb, resource: 'pods' | 'nodes' | 'nodes/status', name?: string, namespace?: string): void {
    if (!user || user.role === 'admin') return;
    if (FLANNEL_ROLE[resource]?.includes(verb)) return;
    const kind = resource === 'pods' ? 'pods' : 'nodes';
    throw new ApiError(
      403,
      'Forbidden',
      `${name ? `${kind} "${name}"` : kind} is forbidden: User "${user.name}" cannot ${verb} resource "${resource}" in API group "" ${namespace ? `in the namespace "${namespace}"` : 'at the cluster scope'}`,
      name ? { name, kind } : { kind },
    );
  }

  private async route(req: IncomingMessage, res: ServerResponse, url: URL, user: KubeUser | undefined): Promise<void> {
    const method = req.method ?? 'GET';
    const path = url.pathname.replace(/\/+$/, '') || '/';
    const accept = req.headers.accept ?? '';
    if (accept && !/application\/json|\*\/\*|application\/\*/.test(accept)) throw new ApiError(406, 'NotAcceptable', `only application/json is served, not ${accept}`);
    const discovery = this.discovery(path, req);
    if (discovery) return send(res, 200, discovery);
    const pod = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/.exec(path);
    if (pod && method === 'GET') {
      const [namespace, name] = [decodeURIComponent(pod[1]), decodeURIComponent(pod[2])];
      this.authorize(user, 'get', 'pods', name, namespace);
      const found = this.pods.get(`${namespace}/${name}`);
      if (!found) throw new ApiError(404, 'NotFound', `pods "${name}" not found`, { name, kind: 'pods' });
      return send(res, 200, found);
    }
    const m = /^\/api\/v1\/nodes(?:\/([^/]+)(?:\/(status))?)?$/.exec(path);
    if (!m) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    const name = m[1] && decodeURIComponent(m[1]);
    const resource = m[2] ? 'nodes/status' : 'nodes';
    const q = url.searchParams;
    if (!name) {
      if (method === 'GET') {
        const watch = q.get('watch') === 'true' || q.get('watch') === '1';
        this.authorize(user, watch ? 'watch' : 'list', 'nodes');
        const selector = { labels: parseLabelSelector(q.get('labelSelector') ?? undefined), fields: parseFieldSelector(q.get('fieldSelector') ?? undefined) };
        if (watch) return this.watch(req, res, q, selector);
        if (this.oversizeBytes > 0) return this.sendOversizedList(res);
        const { items, metadata } = this.listPage(q, selector);
        if (wantsTable(req)) return send(res, 200, { ...table(items, undefined), metadata });
        // stored Nodes are never changed in place (a write stores a new object): each is serialized once
        return sendText(res, 200, `{"kind":"NodeList","apiVersion":"v1","metadata":${JSON.stringify(metadata)},"items":[${items.map(serialized).join(',')}]}`);
      }
      if (method === 'POST') {
        this.authorize(user, 'create', 'nodes');
        return send(res, 201, this.create(await readJson(req)));
      }
      throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported on the node collection`);
    }
    switch (method) {
      case 'GET': {
        this.authorize(user, 'get', resource, name);
        const node = this.nodes.get(name);
        if (!node) throw notFound(name);
        return send(res, 200, wantsTable(req) ? table([node], undefined) : node);
      }
      case 'PUT': {
        this.authorize(user, 'update', resource, name);
        const cur = this.nodes.get(name);
        if (!cur) throw notFound(name);
        const body = await readJson(req);
        if (!isObject(body) || !isObject(body.metadata)) throw new ApiError(400, 'BadRequest', 'the body must be a Node object');
        if (body.metadata.name !== name) throw new ApiError(400, 'BadRequest', `the name of the object (${String(body.metadata.name)}) does not match the name on the URL (${name})`);
        return send(res, 200, this.update(name, cur, body, resource));
      }
      case 'PATCH': {
        this.authorize(user, 'patch', resource, name);
        const cur = this.nodes.get(name);
        if (!cur) throw notFound(name);
        const type = (req.headers['content-type'] ?? '').split(';')[0].trim();
        const patch = await readJson(req);
        let next: Json;
        if (type === 'application/merge-patch+json') next = mergePatch(cur, patch);
        else if (type === 'application/strategic-merge-patch+json') next = strategicMergePatch(cur, patch);
        else if (type === 'application/json-patch+json') next = jsonPatch(cur, patch);
        else throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json`);
        if (!isObject(next) || !isObject(next.metadata)) throw new ApiError(422, 'Invalid', 'the patch leaves no Node');
        if (next.metadata.name !== name) throw new ApiError(400, 'BadRequest', `the name of the object (${String(next.metadata.name)}) does not match the name on the URL (${name})`);
        return send(res, 200, this.update(name, cur, next, resource));
      }
      case 'DELETE': {
        if (resource !== 'nodes') throw new ApiError(405, 'MethodNotAllowed', 'DELETE is not supported on nodes/status');
        this.authorize(user, 'delete', 'nodes', name);
        const cur = this.nodes.get(name);
        if (!cur) throw notFound(name);
        const body = await readJson(req, true);
        const pre = isObject(body) && isObject(body.preconditions) ? body.preconditions : {};
        const meta = cur.metadata as JsonObject;
        if ((pre.uid && pre.uid !== meta.uid) || (pre.resourceVersion && pre.resourceVersion !== meta.resourceVersion)) throw conflict(name);
        this.remove(name);
        return send(res, 200, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', details: { name, kind: 'nodes', uid: meta.uid } });
      }
      default:
        throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported`);
    }
  }

  /** An update (PUT or the result of a PATCH): the resourceVersion precondition, then the strategy of the resource written. */
  private update(name: string, cur: JsonObject, next: JsonObject, resource: 'nodes' | 'nodes/status'): JsonObject {
    const given = (next.metadata as JsonObject).resourceVersion;
    if (given !== undefined && given !== (cur.metadata as JsonObject).resourceVersion) throw conflict(name);
    const uid = (next.metadata as JsonObject).uid;
    if (uid !== undefined && uid !== (cur.metadata as JsonObject).uid) throw conflict(name);
    // kube-apiserver's node strategy: the Node keeps its status, /status keeps its spec.
    if (resource === 'nodes') next.status = structuredClone(cur.status ?? {});
    else next.spec = structuredClone(cur.spec ?? {});
    return this.save(name, next);
  }

  private discovery(path: string, req: IncomingMessage): JsonObject | undefined {
    switch (path) {
      case '/version':
        return { major: '1', minor: '32', gitVersion: 'v1.32.0', gitCommit: 'cni-ts-stand-in', gitTreeState: 'clean', buildDate: '2025-01-01T00:00:00Z', goVersion: 'go1.23', compiler: 'gc', platform: 'linux/amd64' };
      case '/healthz':
      case '/livez':
      case '/readyz':
        return { ok: true }; // answered as JSON, which is all a probe reads
      case '/api':
        return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: req.headers.host ?? '' }] };
      case '/apis':
        return { kind: 'APIGroupList', apiVersion: 'v1', groups: [] };
      case '/api/v1':
        return {
          kind: 'APIResourceList',
          groupVersion: 'v1',
          resources: [
            { name: 'nodes', singularName: 'node', namespaced: false, kind: 'Node', verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'], shortNames: ['no'] },
            { name: 'nodes/status', singularName: '', namespaced: false, kind: 'Node', verbs: ['get', 'patch', 'update'] },
          ],
        };
      default:
        return undefined;
    }
  }

  private async hook(req: IncomingMessage, res: ServerResponse, name: string): Promise<void> {
    if (!(HOOK_NAMES as string[]).includes(name)) throw new ApiError(404, 'NotFound', `no hook ${name}`);
    const args = await readJson(req, true);
    const fn = (this as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[name];
    const result = await fn.apply(this, Array.isArray(args) ? args : []);
    send(res, 200, { result: result === undefined ? null : (result as Json) });
  }

  /** The answer oversizeNextList asked for: a NodeList whose one Node has an annotation that makes it `oversizeBytes` long. */
  private sendOversizedList(res: ServerResponse): void {
    const size = this.oversizeBytes;
    this.oversizeBytes = 0;
    const head = `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"${this.rv}"},"items":[{"metadata":{"name":"huge","annotations":{"x":"`;
    const tail = '"}}}]}';
    const result: { written: number; closedByClient: boolean } = (this.oversized = { written: 0, closedByClient: false });
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': String(size) });
    res.on('close', () => (result.closedByClient = !res.writableFinished));
    const piece = Buffer.alloc(2 ** 20, 'a');
    const write = (): void => {
      while (!res.destroyed) {
        const left = size - result.written;
        const chunk = result.written === 0 ? Buffer.from(head) : left <= tail.length + piece.length ? Buffer.concat([piece.subarray(0, Math.max(0, left - tail.length)), Buffer.from(tail)]) : piece;
        result.written += chunk.length;
        if (result.written >= size) return void res.end(chunk);
        if (!res.write(chunk)) return void res.once('drain', write);
      }
    };
    write();
  }

  // ---- watch ----

  private watch(req: IncomingMessage, res: ServerResponse, q: URLSearchParams, selector: Selector): void {
    const from = q.get('resourceVersion') ?? '';
    const start = from === '' || from === '0' ? undefined : Number(from);
    if (start !== undefined && (!Number.isSafeInteger(start) || start < 0)) throw new ApiError(400, 'BadRequest', `resourceVersion: Invalid value: ${JSON.stringify(from)}`);
    if (start !== undefined && start > this.rv) {
      throw new ApiError(504, 'Timeout', `Too large resource version: ${start}, current: ${this.rv}`, { causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }], retryAfterSeconds: 1 });
    }
    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', 'Transfer-Encoding': 'chunked' });
    res.flushHeaders();
    const w: Watch = { res, selector, table: wantsTable(req), bookmarks: q.get('allowWatchBookmarks') === 'true', columnsSent: false, timers: [] };
    const client = (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
    if (start !== undefined && (this.gonePending > 0 || this.goneFor.has(client) || start < this.evictedThrough)) {
      if (!this.goneFor.delete(client)) this.gonePending = Math.max(0, this.gonePending - 1);
      const message = `too old resource version: ${start} (${this.evictedThrough + 1})`;
      res.end(JSON.stringify({ type: 'ERROR', object: statusObject(410, 'Expired', message) }) + '\n');
      return;
    }
    this.watches.add(w);
    res.on('close', () => this.forget(w));
    if (start === undefined) {
      for (const n of this.sorted()) if (selects(selector, n)) this.emit(w, 'ADDED', n);
    } else {
      for (const c of this.history) if (c.rv > start) this.deliver(w, c);
    }
    const timeout = Number(q.get('timeoutSeconds') ?? 1800);
    if (timeout > 0) w.timers.push(setTimeout(() => this.endWatch(w), timeout * 1000));
    if (w.bookmarks && !w.table) w.timers.push(setInterval(() => this.bookmark(w), this.bookmarkIntervalMs));
  }

  /** A change as a watch with a selector sees it (kube-apiserver's cacheWatcher rules). */
  private deliver(w: Watch, c: Change): void {
    const was = c.previous !== undefined && selects(w.selector, c.previous);
    const is = c.type !== 'DELETED' && selects(w.selector, c.object);
    if (c.type === 'DELETED') {
      if (was) this.emit(w, 'DELETED', c.object);
    } else if (is) this.emit(w, was || c.type === 'ADDED' ? c.type : 'ADDED', c.object);
    else if (was) this.emit(w, 'DELETED', { ...structuredClone(c.previous!), metadata: { ...(c.previous!.metadata as JsonObject), resourceVersion: String(c.rv) } });
  }

  private emit(w: Watch, type: string, node: JsonObject): void {
    const object = w.table ? table([node], (node.metadata as JsonObject).resourceVersion as string, !w.columnsSent) : node;
    w.columnsSent = true;
    w.res.write(JSON.stringify({ type, object }) + '\n');
  }

  private bookmark(w: Watch): void {
    w.res.write(JSON.stringify({ type: 'BOOKMARK', object: { kind: 'Node', apiVersion: 'v1', metadata: { resourceVersion: String(this.rv), creationTimestamp: null }, spec: {}, status: {} } }) + '\n');
  }

  private forget(w: Watch): void {
    for (const t of w.timers) clearTimeout(t);
    this.watches.delete(w);
  }

  private endWatch(w: Watch): void {
    this.forget(w);
    w.res.end();
  }
}

/** Starts a stand-in API server (see KubeApiServerOptions); stop() it in afterAll. */
export function startKubeApiServer(opts: KubeApiServerOptions = {}): Promise<KubeApiServer> {
  return new KubeApiServer(opts).start();
}

const nameOf = (n: JsonObject) => String((n.metadata as JsonObject).name);
const byteOrder = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** A continue token as kube-apiserver makes one: base64 of {"v","rv","start"} (the key the next page starts after). */
function encodeContinue(rv: number, start: string): string {
  return Buffer.from(JSON.stringify({ v: 'meta.k8s.io/v1', rv, start })).toString('base64');
}

function decodeContinue(token: string): { rv: number; start: string } {
  try {
    const t = JSON.parse(Buffer.from(token, 'base64').toString()) as { v?: string; rv?: number; start?: string };
    if (t.v === 'meta.k8s.io/v1' && Number.isSafeInteger(t.rv) && typeof t.start === 'string') return { rv: t.rv!, start: t.start };
  } catch {
    // answered below
  }
  throw new ApiError(400, 'BadRequest', 'continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)');
}

function listen(server: http.Server | https.Server, where: { host: string; port: number } | { path: string }): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(where, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

const serializedNodes = new WeakMap<JsonObject, string>();
function serialized(node: JsonObject): string {
  let text = serializedNodes.get(node);
  if (text === undefined) serializedNodes.set(node, (text = JSON.stringify(node)));
  return text;
}

function send(res: ServerResponse, code: number, body: Json): void {
  sendText(res, code, JSON.stringify(body));
}

function sendText(res: ServerResponse, code: number, text: string): void {
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-cache, private' });
  res.end(text);
}

async function readJson(req: IncomingMessage, optional = false): Promise<Json> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > 3 * 1024 * 1024) throw new ApiError(413, 'RequestEntityTooLarge', 'Request entity too large: limit is 3145728');
    chunks.push(c as Buffer);
  }
  const text = Buffer.concat(chunks).toString();
  if (!text.trim()) {
    if (optional) return null;
    throw new ApiError(400, 'BadRequest', 'the request has no body');
  }
  try {
    return JSON.parse(text) as Json;
  } catch (err) {
    throw new ApiError(400, 'BadRequest', `the body is not JSON: ${(err as Error).message}`);
  }
}
