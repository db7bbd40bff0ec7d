// A stand-in kube-apiserver for tests: Nodes, Namespaces, Pods and
// NetworkPolicies (kube-kinds.ts), over real HTTP(S), with the semantics an
// informer and kubectl rely on (facts from the Kubernetes API docs, "API
// concepts", and kube-apiserver's strategies):
//
// - list, get, create, update (PUT), delete, and PATCH in the three formats
//   (kube-patch.ts), on /api/v1/nodes[/NAME], /api/v1/namespaces[/NAME],
//   /api/v1/namespaces/NS/pods[/NAME] and
//   /apis/networking.k8s.io/v1/namespaces/NS/networkpolicies[/NAME], and the
//   status subresources (nodes, namespaces, pods: NAME/status). As in
//   kube-apiserver, a write to the object keeps its old status and a write to
//   /status keeps its old spec; metadata (annotations, labels) changes
//   through both (flanneld patches its annotations through /status). A write
//   that changes nothing is no write. Namespaced kinds are also listed and
//   watched across namespaces (/api/v1/pods, /apis/networking.k8s.io/v1/
//   networkpolicies). An object is created in a namespace that exists (404
//   otherwise); deleting a namespace deletes what is in it, then it (at once:
//   no Terminating phase). A created Namespace gets its
//   kubernetes.io/metadata.name label and phase Active, a Pod created over
//   the API phase Pending; a NetworkPolicy is stored as given, without the
//   API's defaulting (policyTypes), so that a client's own defaulting is
//   what the tests see.
// - one resourceVersion counter for the whole server, bumped by every write;
//   a given metadata.resourceVersion in an update or patch is a precondition
//   (409 Conflict).
// - watch (?watch=1): newline-separated JSON events ADDED, MODIFIED, DELETED,
//   BOOKMARK (allowWatchBookmarks=true) and ERROR on a chunked 200 response;
//   from resourceVersion unset or "0" it starts with an ADDED per object, from
//   N it replays the changes after N from a bounded history of the kind (its
//   watch cache); an N older than the history is answered, as kube-apiserver
//   answers it, by an ERROR event holding a 410 Expired Status.
//   timeoutSeconds ends the stream. labelSelector and fieldSelector
//   (metadata.name, metadata.namespace, and each kind's own: spec.nodeName,
//   status.phase, spec.unschedulable...) work for list and watch; an object
//   that stops matching a watch's selector is DELETED for it, one that starts
//   matching is ADDED.
// - paged lists (?limit=N, then ?continue=TOKEN): every page is the list as
//   it was at the first page's resourceVersion (rebuilt from the watch
//   history), which each page carries; metadata.continue is set while more
//   remain (with remainingItemCount when there is no selector). A token whose
//   resourceVersion fell out of the history (etcd compacted it) is answered
//   410 Expired, with a token for the inconsistent remainder in the Status's
//   metadata.continue, as kube-apiserver answers it; so is the next one after
//   the expireContinueTokens hook.
// - server-side Table output (Accept: ...;as=Table;g=meta.k8s.io) for list,
//   get and watch, with kubectl's columns; discovery (/version, /api,
//   /api/v1, /apis, /apis/networking.k8s.io[/v1]) and legacy JSON errors
//   (Status objects).
// - authentication: bearer tokens and, over TLS, client certificates signed
//   by `clientCA` (the user is the CN); users have roles, RBAC rules
//   (ROLE_RULES): "admin" (anything), "flannel" (kube-flannel's ClusterRole:
//   get/list/watch nodes, patch nodes/status, get pods), "network-policy"
//   (deploy/kube-flannel.yml's ClusterRole for --network-policy: list and
//   watch pods, namespaces and networkpolicies). Every client is treated
//   alike: kubectl, our client, curl.
//
// Test hooks (KubeApiHooks) run in-process, or through the control socket (a
// unix socket: reachable from any network namespace, which matters when the
// server runs inside one, see kube-apiserver-process.ts). The control socket
// also serves the API itself without authentication.
//
// Not modelled: other kinds, server-side apply, protobuf, dry-run,
// managedFields, finalizers/graceful deletion, watch-list
// (sendInitialEvents), the API's validation of objects.
import { randomUUID } from 'node:crypto';
import { chmodSync, rmSync } from 'node:fs';
import http, { IncomingMessage, ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { KINDS, apiVersionOf, kindOf, type KindSpec } from './kube-kinds';
import { Json, JsonObject, PatchError, isObject, jsonPatch, mergePatch, strategicMergePatch } from './kube-patch';
import { Requirement, SelectorError, matches, parseFieldSelector, parseLabelSelector } from './kube-selectors';

export type { Json, JsonObject } from './kube-patch';

export type Role = 'admin' | 'flannel' | 'network-policy';

export interface KubeUser {
  name: string;
  /** Its bearer token; users without one authenticate by client certificate (CN = name). */
  token?: string;
  role: Role | Role[];
}

export interface KubeApiServerOptions {
  /** Where to listen; default 127.0.0.1 and a free port. */
  host?: string;
  port?: number;
  /** Serve HTTPS with this certificate; `clientCA` (PEM) verifies client certificates. */
  tls?: { cert: string; key: string; clientCA?: string };
  /** Who may call. Without users and without a client CA, anyone may (plain test servers). */
  users?: KubeUser[];
  /** How many events each kind's watch history keeps (kube-apiserver's watch cache holds the last ~100 per type by default). */
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

/** An object as stored: plain JSON, loosely typed for the tests' convenience. */
export type StoredObject = { metadata: { name: string; [key: string]: any }; [key: string]: any };
export type StoredNode = StoredObject;

/** What a test can do to the server besides calling its API; in-process and over the control socket alike. */
export interface KubeApiHooks {
  /** Creates an object of `resource` (nodes, namespaces, pods, networkpolicies) as it is given (status included), as another component would write it; returns it as stored. */
  create(resource: string, object: JsonObject): Promise<StoredObject>;
  /** Creates many objects of `resource` at once (benches: thousands of Pods); returns how many. */
  createMany(resource: string, objects: JsonObject[]): Promise<number>;
  /** The object `key` (its name, or namespace/name) of `resource`. */
  get(resource: string, key: string): Promise<StoredObject | undefined>;
  list(resource: string): Promise<StoredObject[]>;
  /** A JSON merge patch of the whole object (spec, status, metadata), as another component would write it. */
  patch(resource: string, key: string, patch: Json): Promise<StoredObject>;
  /** Replaces the object (named by its metadata) with `object`, as an update (PUT) does: one MODIFIED. */
  update(resource: string, object: JsonObject): Promise<StoredObject>;
  /** Deletes the object (a namespace: with what is in it); false when it is not there. */
  delete(resource: string, key: string): Promise<boolean>;
  /** Stores a Pod as it is given (create('pods'), also in a namespace that does not exist). */
  createPod(pod: JsonObject): Promise<void>;
  /** Creates a Node as it is given (status included), as the API does; returns it as stored. */
  createNode(node: JsonObject): Promise<StoredNode>;
  getNode(name: string): Promise<StoredNode | undefined>;
  listNodes(): Promise<StoredNode[]>;
  /** A JSON merge patch of the whole Node (spec, status, metadata), as another component would write it. */
  patchNode(name: string, patch: Json): Promise<StoredNode>;
  deleteNode(name: string): Promise<boolean>;
  /**
   * The next watch (or the next `times` watches) that starts from a
   * resourceVersion (not unset or "0") gets 410 Expired. `from` (client
   * addresses): each of them gets 410 on its own next watch from a
   * resourceVersion, whoever else reconnects first (a shared count can be
   * used up by one fast client).
   */
  forceGone(times?: number, from?: string[]): Promise<void>;
  /** Breaks every open watch stream (the connection is destroyed, no clean end); returns how many. */
  dropWatches(): Promise<number>;
  /** Sends a BOOKMARK to every watch that allows them, now; returns how many. */
  sendBookmarks(): Promise<number>;
  /** Writes `count` times to "other resources": the resourceVersion moves on, nothing changes. Returns the new one. */
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
  'create', 'createMany', 'get', 'list', 'patch', 'update', 'delete',
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

const notFound = (k: KindSpec, name: string) => new ApiError(404, 'NotFound', `${k.resource}${k.group ? `.${k.group}` : ''} "${name}" not found`, { name, ...(k.group ? { group: k.group } : {}), kind: k.resource });
const conflict = (k: KindSpec, name: string) =>
  new ApiError(409, 'Conflict', `Operation cannot be fulfilled on ${k.resource} "${name}": the object has been modified; please apply your changes to the latest version and try again`, { name, kind: k.resource });

/** What kube-apiserver shows anyone (system:public-info-viewer). */
const PUBLIC_PATHS = new Set(['/version', '/healthz', '/livez', '/readyz']);

type Verb = 'get' | 'list' | 'watch' | 'create' | 'update' | 'patch' | 'delete';

/** An RBAC PolicyRule, as a ClusterRole lists them. */
export interface RbacRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/**
 * The roles' rules: "flannel" is kube-flannel's ClusterRole, "network-policy"
 * the ClusterRole deploy/kube-flannel.yml adds for --network-policy (a unit
 * test holds the manifest to these).
 */
export const ROLE_RULES: Record<Role, RbacRule[]> = {
  admin: [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }],
  flannel: [
    { apiGroups: [''], resources: ['pods'], verbs: ['get'] },
    { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: [''], resources: ['nodes/status'], verbs: ['patch'] },
  ],
  'network-policy': [
    { apiGroups: [''], resources: ['pods', 'namespaces'], verbs: ['list', 'watch'] },
    { apiGroups: ['networking.k8s.io'], resources: ['networkpolicies'], verbs: ['list', 'watch'] },
  ],
};

const any = (list: string[], v: string) => list.includes('*') || list.includes(v);

// ---- the server ----------------------------------------------------------------

interface Change {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** The object after the change (DELETED: as it was, with the deletion's resourceVersion). */
  object: JsonObject;
  previous?: JsonObject;
}

/** One kind's objects and watch history. */
interface Store {
  kind: KindSpec;
  objects: Map<string, JsonObject>;
  /** The keys in etcd's order (byte order); undefined after a create or delete. */
  sorted?: string[];
  history: Change[];
  /** The newest resourceVersion whose change fell out of the history: a watch must start at or after it. */
  evictedThrough: number;
  /** The list at an older resourceVersion, as a paged list's later pages read it (made once per list, as etcd keeps it). */
  snapshot?: { rv: number; objects: JsonObject[] };
}

interface Selector {
  labels: Requirement[];
  fields: Requirement[];
}

interface Watch {
  res: ServerResponse;
  store: Store;
  /** A watch of one namespace's objects. */
  namespace?: string;
  selector: Selector;
  table: boolean;
  bookmarks: boolean;
  columnsSent: boolean;
  timers: NodeJS.Timeout[];
}

/** Where a request goes: a kind, in a namespace or not, an object or the collection, a subresource. */
interface Target {
  kind: KindSpec;
  namespace?: string;
  name?: string;
  subresource?: string;
}

const NAME_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const metaOf = (o: JsonObject) => o.metadata as JsonObject;
const keyOf = (o: JsonObject) => {
  const m = metaOf(o);
  return m.namespace !== undefined ? `${String(m.namespace)}/${String(m.name)}` : String(m.name);
};
const byteOrder = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const wantsTable = (req: IncomingMessage) => /as=Table/.test(req.headers.accept ?? '') && /g=meta\.k8s\.io/.test(req.headers.accept ?? '');

export class KubeApiServer implements KubeApiHooks {
  private readonly stores = new Map<string, Store>(KINDS.map((k) => [k.resource, { kind: k, objects: new Map(), history: [], evictedThrough: 0 }]));
  private rv = 1;
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

  private store(resource: string): Store {
    const s = this.stores.get(resource);
    if (!s) throw new ApiError(404, 'NotFound', `no resource ${JSON.stringify(resource)} here (${[...this.stores.keys()].join(', ')})`);
    return s;
  }

  async create(resource: string, object: JsonObject): Promise<StoredObject> {
    return this.createIn(this.store(resource), object, true) as StoredObject;
  }
  async createMany(resource: string, objects: JsonObject[]): Promise<number> {
    const s = this.store(resource);
    for (const o of objects) this.createIn(s, o, true);
    return objects.length;
  }
  async get(resource: string, key: string): Promise<StoredObject | undefined> {
    const o = this.store(resource).objects.get(key);
    return o && (structuredClone(o) as StoredObject);
  }
  async list(resource: string): Promise<StoredObject[]> {
    return this.sorted(this.store(resource)).map((o) => structuredClone(o) as StoredObject);
  }
  async patch(resource: string, key: string, patch: Json): Promise<StoredObject> {
    const s = this.store(resource);
    const cur = s.objects.get(key);
    if (!cur) throw notFound(s.kind, key);
    return this.save(s, key, mergePatch(cur, patch) as JsonObject) as StoredObject;
  }
  async update(resource: string, object: JsonObject): Promise<StoredObject> {
    const s = this.store(resource);
    const key = keyOf(object);
    if (!s.objects.has(key)) throw notFound(s.kind, key);
    return this.save(s, key, structuredClone(object)) as StoredObject;
  }
  async delete(resource: string, key: string): Promise<boolean> {
    const s = this.store(resource);
    if (!s.objects.has(key)) return false;
    this.remove(s, key);
    return true;
  }
  async createPod(pod: JsonObject): Promise<void> {
    await this.create('pods', pod);
  }
  async createNode(node: JsonObject): Promise<StoredNode> {
    return this.create('nodes', node);
  }
  async getNode(name: string): Promise<StoredNode | undefined> {
    return this.get('nodes', name);
  }
  async listNodes(): Promise<StoredNode[]> {
    return this.list('nodes');
  }
  async patchNode(name: string, patch: Json): Promise<StoredNode> {
    return this.patch('nodes', name, patch);
  }
  async deleteNode(name: string): Promise<boolean> {
    return this.delete('nodes', name);
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

  /** A kind's objects in etcd's key order (byte order of namespace/name): the order lists and their pages follow. */
  private sorted(s: Store, objects?: Iterable<JsonObject>): JsonObject[] {
    if (objects) {
      const keyed = [...objects].map((o) => [keyOf(o), o] as const);
      return keyed.sort(([a], [b]) => byteOrder(a, b)).map(([, o]) => o);
    }
    // the order is kept between creates and deletes: a list of thousands is paged without sorting them each time
    s.sorted ??= [...s.objects.keys()].sort(byteOrder);
    return s.sorted.map((k) => s.objects.get(k)!);
  }

  /** The objects as they were at resourceVersion `rv` (at or after evictedThrough): the current ones with the later changes undone. */
  private objectsAt(s: Store, rv: number): Iterable<JsonObject> {
    if (rv >= this.rv) return s.objects.values();
    const at = new Map(s.objects);
    for (let i = s.history.length - 1; i >= 0 && s.history[i].rv > rv; i--) {
      const c = s.history[i];
      if (c.type === 'ADDED') at.delete(keyOf(c.object));
      else at.set(keyOf(c.object), c.previous!);
    }
    return at.values();
  }

  /** Whether `o` is in `namespace` (when given) and matches the selector. */
  private selects(s: Store, sel: Selector, o: JsonObject, namespace?: string): boolean {
    const meta = metaOf(o);
    if (namespace !== undefined && meta.namespace !== namespace) return false;
    const labels = (meta.labels ?? {}) as Record<string, string>;
    const field = (k: string) => (k === 'metadata.name' ? String(meta.name) : k === 'metadata.namespace' ? String(meta.namespace ?? '') : s.kind.fields[k]?.(o));
    return matches(sel.labels, (k) => labels[k]) && matches(sel.fields, field);
  }

  /**
   * One page of a list (kube-apiserver's limit/continue): without a continue
   * token, the first `limit` objects now; with one, the next `limit` after its
   * key as they were at its resourceVersion. Every page carries that
   * resourceVersion; metadata.continue is set while more remain.
   */
  private listPage(s: Store, q: URLSearchParams, selector: Selector, namespace?: string): { items: JsonObject[]; metadata: JsonObject } {
    const limitText = q.get('limit');
    const limit = limitText ? Number(limitText) : 0;
    if (limitText && !Number.isSafeInteger(limit)) throw new ApiError(400, 'BadRequest', `limit: Invalid value: ${JSON.stringify(limitText)}`);
    const token = q.get('continue');
    let rv = this.rv;
    let after: string | undefined;
    if (token) {
      if (q.get('resourceVersion')) throw new ApiError(400, 'BadRequest', 'specifying resource version is not allowed when using continue');
      const t = decodeContinue(token);
      if (this.continueExpiries > 0 || t.rv < s.evictedThrough) {
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
    let all: JsonObject[];
    if (rv >= this.rv) all = this.sorted(s);
    else {
      // the later pages of a list the server has written since: the list as it was, made once and kept for them
      if (s.snapshot?.rv !== rv) s.snapshot = { rv, objects: this.sorted(s, this.objectsAt(s, rv)) };
      all = s.snapshot.objects;
    }
    // the first object after the token's key, found by bisection: paging through thousands stays linear
    let lo = 0;
    for (let hi = all.length; after !== undefined && lo < hi; ) {
      const mid = (lo + hi) >> 1;
      if (byteOrder(keyOf(all[mid]), after) > 0) hi = mid;
      else lo = mid + 1;
    }
    const plain = !selector.labels.length && !selector.fields.length && namespace === undefined;
    const items: JsonObject[] = [];
    let i = lo;
    for (; i < all.length && (limit <= 0 || items.length < limit); i++) if (plain || this.selects(s, selector, all[i], namespace)) items.push(all[i]);
    const remaining = plain ? all.length - i : all.slice(i).filter((o) => this.selects(s, selector, o, namespace)).length;
    const metadata: JsonObject = { resourceVersion: String(rv) };
    if (remaining > 0) {
      metadata.continue = encodeContinue(rv, keyOf(items[items.length - 1]));
      if (plain) metadata.remainingItemCount = remaining;
    }
    return { items, metadata };
  }

  /** A create: a valid name, not there yet, in a namespace that exists (over the API: `hook` false). */
  private createIn(s: Store, input: Json, hook: boolean, namespace?: string): JsonObject {
    const k = s.kind;
    if (!isObject(input) || !isObject(input.metadata)) throw new ApiError(400, 'BadRequest', `the body must be a ${k.kind} object`);
    const name = input.metadata.name;
    if (typeof name !== 'string' || !NAME_RE.test(name) || name.length > 253) {
      throw new ApiError(422, 'Invalid', `${k.kind} "${String(name)}" is invalid: metadata.name: Invalid value: ${JSON.stringify(name)}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'`, { name: String(name), kind: k.kind });
    }
    let ns: string | undefined;
    if (k.namespaced) {
      ns = namespace ?? (typeof input.metadata.namespace === 'string' ? input.metadata.namespace : undefined);
      if (!ns) throw new ApiError(400, 'BadRequest', 'the namespace of the object must be given');
      if (input.metadata.namespace !== undefined && input.metadata.namespace !== ns) throw new ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
      if (!hook && !this.stores.get('namespaces')!.objects.has(ns)) throw new ApiError(404, 'NotFound', `namespaces "${ns}" not found`, { name: ns, kind: 'namespaces' });
    }
    const key = ns !== undefined ? `${ns}/${name}` : name;
    if (s.objects.has(key)) throw new ApiError(409, 'AlreadyExists', `${k.resource}${k.group ? `.${k.group}` : ''} "${name}" already exists`, { name, kind: k.resource });
    const o: JsonObject = {
      ...structuredClone(input),
      kind: k.kind,
      apiVersion: apiVersionOf(k),
      metadata: { ...structuredClone(input.metadata), ...(ns !== undefined ? { namespace: ns } : {}), uid: randomUUID(), creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z') },
      ...(isObject(input.spec) ? { spec: structuredClone(input.spec) } : k.status ? { spec: {} } : {}),
      ...(k.status ? { status: isObject(input.status) ? structuredClone(input.status) : {} } : {}),
    };
    delete (o.metadata as JsonObject).resourceVersion;
    k.onCreate?.(o, hook);
    s.objects.set(key, o);
    s.sorted = undefined;
    this.record(s, 'ADDED', o);
    return structuredClone(o);
  }

  /** Stores `next` as the object at `key` unless nothing changed; the identity fields stay the server's. */
  private save(s: Store, key: string, next: JsonObject): JsonObject {
    const cur = s.objects.get(key)!;
    const curMeta = metaOf(cur);
    next.kind = s.kind.kind;
    next.apiVersion = apiVersionOf(s.kind);
    const meta: JsonObject = {
      ...(isObject(next.metadata) ? next.metadata : {}),
      name: curMeta.name,
      ...(curMeta.namespace !== undefined ? { namespace: curMeta.namespace } : {}),
      uid: curMeta.uid,
      creationTimestamp: curMeta.creationTimestamp,
      resourceVersion: curMeta.resourceVersion,
    };
    if (s.kind.resource === 'namespaces') meta.labels = { ...(isObject(meta.labels) ? meta.labels : {}), 'kubernetes.io/metadata.name': String(curMeta.name) };
    next.metadata = meta;
    if (JSON.stringify(next) === JSON.stringify(cur)) return structuredClone(cur);
    s.objects.set(key, next);
    this.record(s, 'MODIFIED', next, cur);
    return structuredClone(next);
  }

  /** Deletes the object at `key`; a namespace takes what is in it along first. */
  private remove(s: Store, key: string): JsonObject {
    if (s.kind.resource === 'namespaces') {
      for (const other of this.stores.values()) {
        if (!other.kind.namespaced) continue;
        for (const k of [...other.objects.keys()]) if (k.startsWith(`${key}/`)) this.remove(other, k);
      }
    }
    const cur = s.objects.get(key)!;
    s.objects.delete(key);
    s.sorted = undefined;
    const gone = structuredClone(cur);
    this.record(s, 'DELETED', gone, cur);
    return gone;
  }

  /** A write: the next resourceVersion, into the kind's history and out to the watches. */
  private record(s: Store, type: Change['type'], object: JsonObject, previous?: JsonObject): void {
    this.rv++;
    metaOf(object).resourceVersion = String(this.rv);
    const change: Change = { rv: this.rv, type, object: structuredClone(object), previous: previous && structuredClone(previous) };
    s.history.push(change);
    while (s.history.length > this.historyLimit) s.evictedThrough = s.history.shift()!.rv;
    for (const w of this.watches) if (w.store === s) this.deliver(w, change);
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
      const e =
        err instanceof ApiError
          ? err
          : err instanceof PatchError
            ? new ApiError(err.code, err.code === 400 ? 'BadRequest' : 'Invalid', err.message)
            : err instanceof SelectorError
              ? new ApiError(400, 'BadRequest', err.message)
              : new ApiError(500, 'InternalError', String(err));
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

  /** RBAC: one of the user's roles has a rule for the verb on the resource (a subresource as "pods/status"). */
  private authorize(user: KubeUser | undefined, verb: Verb, t: Target): void {
    if (!user) return;
    const resource = t.subresource ? `${t.kind.resource}/${t.subresource}` : t.kind.resource;
    const roles = Array.isArray(user.role) ? user.role : [user.role];
    if (roles.some((r) => ROLE_RULES[r].some((rule) => any(rule.apiGroups, t.kind.group) && any(rule.resources, resource) && any(rule.verbs, verb)))) return;
    const what = t.name ? `${t.kind.resource}${t.kind.group ? `.${t.kind.group}` : ''} "${t.name}"` : `${t.kind.resource}${t.kind.group ? `.${t.kind.group}` : ''}`;
    throw new ApiError(
      403,
      'Forbidden',
      `${what} is forbidden: User "${user.name}" cannot ${verb} resource "${resource}" in API group "${t.kind.group}" ${t.namespace !== undefined ? `in the namespace "${t.namespace}"` : 'at the cluster scope'}`,
      { ...(t.name ? { name: t.name } : {}), ...(t.kind.group ? { group: t.kind.group } : {}), kind: t.kind.resource },
    );
  }

  /** The kind, namespace, name and subresource a path names; undefined for a path that is not a resource's. */
  private target(path: string): Target | undefined {
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    let group: string;
    let rest: string[];
    if (parts[0] === 'api' && parts[1] === 'v1') [group, rest] = ['', parts.slice(2)];
    else if (parts[0] === 'apis' && parts.length >= 3 && parts[2] === 'v1') [group, rest] = [parts[1], parts.slice(3)];
    else return undefined;
    if (rest[0] === 'namespaces' && rest.length >= 3) {
      const kind = kindOf(rest[2], group);
      if (kind?.namespaced && rest.length <= 5) return { kind, namespace: rest[1], name: rest[3], subresource: rest[4] };
    }
    const kind = kindOf(rest[0], group);
    if (!kind || rest.length > 3) return undefined;
    return { kind, name: rest[1], subresource: rest[2] };
  }

  private async route(req: IncomingMessage, res: ServerResponse, url: URL, user: KubeUser | undefined): Promise<void> {
    const method = req.method ?? 'GET';
    const path = url.pathname.replace(/\/+$/, '') || '/';
    const accept = req.headers.accept ?? '';
    if (path === '/openapi/v2' && /protobuf/.test(accept)) {
      // An OpenAPI v2 document with no definitions: protobuf's empty message. kubectl then finds no schema for
      // any kind, so it validates nothing itself (the server would) and patches by its own types.
      res.writeHead(200, { 'Content-Type': 'application/com.github.proto-openapi.spec.v2.v1.0+protobuf', 'Content-Length': 0 });
      return void res.end();
    }
    if (accept && !/application\/json|\*\/\*|application\/\*/.test(accept)) throw new ApiError(406, 'NotAcceptable', `only application/json is served, not ${accept}`);
    const discovery = this.discovery(path, req) ?? openApiV3(path);
    if (discovery) return send(res, 200, discovery);
    const t = this.target(path);
    if (!t || (t.subresource !== undefined && (t.subresource !== 'status' || !t.kind.status))) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    const s = this.store(t.kind.resource);
    const q = url.searchParams;
    if (t.name === undefined) {
      if (method === 'GET') {
        const watch = q.get('watch') === 'true' || q.get('watch') === '1';
        this.authorize(user, watch ? 'watch' : 'list', t);
        const selector = { labels: parseLabelSelector(q.get('labelSelector') ?? undefined), fields: parseFieldSelector(q.get('fieldSelector') ?? undefined, this.fieldsOf(t.kind)) };
        if (watch) return this.watch(req, res, q, s, selector, t.namespace);
        if (this.oversizeBytes > 0 && t.kind.resource === 'nodes') return this.sendOversizedList(res);
        const { items, metadata } = this.listPage(s, q, selector, t.namespace);
        if (wantsTable(req)) return send(res, 200, { ...this.table(t.kind, items, undefined), metadata });
        // stored objects are never changed in place (a write stores a new object): each is serialized once
        return sendText(res, 200, `{"kind":"${t.kind.kind}List","apiVersion":"${apiVersionOf(t.kind)}","metadata":${JSON.stringify(metadata)},"items":[${items.map(serialized).join(',')}]}`);
      }
      if (method === 'POST') {
        checkJsonBody(req);
        if (t.kind.namespaced && t.namespace === undefined) throw new ApiError(405, 'MethodNotAllowed', `POST is not supported on ${t.kind.resource} across namespaces`);
        this.authorize(user, 'create', t);
        return send(res, 201, this.createIn(s, await readJson(req), false, t.namespace));
      }
      throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported on the ${t.kind.resource} collection`);
    }
    if (t.kind.namespaced && t.namespace === undefined) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    const key = t.namespace !== undefined ? `${t.namespace}/${t.name}` : t.name;
    switch (method) {
      case 'GET': {
        this.authorize(user, 'get', t);
        const o = s.objects.get(key);
        if (!o) throw notFound(t.kind, t.name);
        return send(res, 200, wantsTable(req) ? this.table(t.kind, [o], undefined) : o);
      }
      case 'PUT': {
        checkJsonBody(req);
        this.authorize(user, 'update', t);
        const cur = s.objects.get(key);
        if (!cur) throw notFound(t.kind, t.name);
        const body = await readJson(req);
        if (!isObject(body) || !isObject(body.metadata)) throw new ApiError(400, 'BadRequest', `the body must be a ${t.kind.kind} object`);
        if (body.metadata.name !== t.name) throw new ApiError(400, 'BadRequest', `the name of the object (${String(body.metadata.name)}) does not match the name on the URL (${t.name})`);
        return send(res, 200, this.write(s, key, cur, body, !!t.subresource));
      }
      case 'PATCH': {
        this.authorize(user, 'patch', t);
        const cur = s.objects.get(key);
        if (!cur) throw notFound(t.kind, t.name);
        const type = (req.headers['content-type'] ?? '').split(';')[0].trim();
        const patch = await readJson(req);
        let next: Json;
        if (type === 'application/merge-patch+json') next = mergePatch(cur, patch);
        else if (type === 'application/strategic-merge-patch+json') next = strategicMergePatch(cur, patch, t.kind.listMerge);
        else if (type === 'application/json-patch+json') next = jsonPatch(cur, patch);
        else throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json`);
        if (!isObject(next) || !isObject(next.metadata)) throw new ApiError(422, 'Invalid', `the patch leaves no ${t.kind.kind}`);
        if (next.metadata.name !== t.name) throw new ApiError(400, 'BadRequest', `the name of the object (${String(next.metadata.name)}) does not match the name on the URL (${t.name})`);
        return send(res, 200, this.write(s, key, cur, next, !!t.subresource));
      }
      case 'DELETE': {
        if (t.subresource) throw new ApiError(405, 'MethodNotAllowed', `DELETE is not supported on ${t.kind.resource}/${t.subresource}`);
        this.authorize(user, 'delete', t);
        const cur = s.objects.get(key);
        if (!cur) throw notFound(t.kind, t.name);
        const body = await readJson(req, true);
        const pre = isObject(body) && isObject(body.preconditions) ? body.preconditions : {};
        const meta = metaOf(cur);
        if ((pre.uid && pre.uid !== meta.uid) || (pre.resourceVersion && pre.resourceVersion !== meta.resourceVersion)) throw conflict(t.kind, t.name);
        this.remove(s, key);
        return send(res, 200, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', details: { name: t.name, ...(t.kind.group ? { group: t.kind.group } : {}), kind: t.kind.resource, uid: meta.uid } });
      }
      default:
        throw new ApiError(405, 'MethodNotAllowed', `${method} is not supported`);
    }
  }

  private fieldsOf(k: KindSpec): Set<string> {
    return new Set(['metadata.name', ...(k.namespaced ? ['metadata.namespace'] : []), ...Object.keys(k.fields)]);
  }

  /** An update (PUT or the result of a PATCH): the resourceVersion precondition, then the strategy of the resource written. */
  private write(s: Store, key: string, cur: JsonObject, next: JsonObject, status: boolean): JsonObject {
    const given = metaOf(next).resourceVersion;
    if (given !== undefined && given !== metaOf(cur).resourceVersion) throw conflict(s.kind, String(metaOf(cur).name));
    const uid = metaOf(next).uid;
    if (uid !== undefined && uid !== metaOf(cur).uid) throw conflict(s.kind, String(metaOf(cur).name));
    // kube-apiserver's strategies: the object keeps its status, /status keeps its spec.
    if (s.kind.status) {
      if (!status) next.status = structuredClone(cur.status ?? {});
      else next.spec = structuredClone(cur.spec ?? {});
    }
    return this.save(s, key, next);
  }

  private table(k: KindSpec, objects: JsonObject[], resourceVersion: string | undefined, withColumns = true): JsonObject {
    return {
      kind: 'Table',
      apiVersion: 'meta.k8s.io/v1',
      metadata: resourceVersion ? { resourceVersion } : {},
      ...(withColumns ? { columnDefinitions: k.columns as unknown as Json[] } : {}),
      rows: objects.map((o) => ({ cells: k.cells(o), object: { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: structuredClone(metaOf(o)) } })),
    };
  }

  private discovery(path: string, req: IncomingMessage): JsonObject | undefined {
    const resources = (group: string): JsonObject[] =>
      KINDS.filter((k) => k.group === group).flatMap((k): JsonObject[] => [
        { name: k.resource, singularName: k.singular, namespaced: k.namespaced, kind: k.kind, verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'], shortNames: k.shortNames },
        ...(k.status ? [{ name: `${k.resource}/status`, singularName: '', namespaced: k.namespaced, kind: k.kind, verbs: ['get', 'patch', 'update'] }] : []),
      ]);
    const group = { name: 'networking.k8s.io', versions: [{ groupVersion: 'networking.k8s.io/v1', version: 'v1' }], preferredVersion: { groupVersion: 'networking.k8s.io/v1', version: 'v1' } };
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
        return { kind: 'APIGroupList', apiVersion: 'v1', groups: [group] };
      case '/apis/networking.k8s.io':
        return { kind: 'APIGroup', apiVersion: 'v1', ...group };
      case '/api/v1':
        return { kind: 'APIResourceList', groupVersion: 'v1', resources: resources('') };
      case '/apis/networking.k8s.io/v1':
        return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: 'networking.k8s.io/v1', resources: resources('networking.k8s.io') };
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

  private watch(req: IncomingMessage, res: ServerResponse, q: URLSearchParams, s: Store, selector: Selector, namespace?: string): void {
    const from = q.get('resourceVersion') ?? '';
    const start = from === '' || from === '0' ? undefined : Number(from);
    if (start !== undefined && (!Number.isSafeInteger(start) || start < 0)) throw new ApiError(400, 'BadRequest', `resourceVersion: Invalid value: ${JSON.stringify(from)}`);
    if (start !== undefined && start > this.rv) {
      throw new ApiError(504, 'Timeout', `Too large resource version: ${start}, current: ${this.rv}`, { causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }], retryAfterSeconds: 1 });
    }
    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', 'Transfer-Encoding': 'chunked' });
    res.flushHeaders();
    const w: Watch = { res, store: s, namespace, selector, table: wantsTable(req), bookmarks: q.get('allowWatchBookmarks') === 'true', columnsSent: false, timers: [] };
    const client = (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
    if (start !== undefined && (this.gonePending > 0 || this.goneFor.has(client) || start < s.evictedThrough)) {
      if (!this.goneFor.delete(client)) this.gonePending = Math.max(0, this.gonePending - 1);
      const message = `too old resource version: ${start} (${s.evictedThrough + 1})`;
      res.end(JSON.stringify({ type: 'ERROR', object: statusObject(410, 'Expired', message) }) + '\n');
      return;
    }
    this.watches.add(w);
    res.on('close', () => this.forget(w));
    if (start === undefined) {
      for (const o of this.sorted(s)) if (this.selects(s, selector, o, namespace)) this.emit(w, 'ADDED', o);
    } else {
      for (const c of s.history) if (c.rv > start) this.deliver(w, c);
    }
    const timeout = Number(q.get('timeoutSeconds') ?? 1800);
    if (timeout > 0) w.timers.push(setTimeout(() => this.endWatch(w), timeout * 1000));
    if (w.bookmarks && !w.table) w.timers.push(setInterval(() => this.bookmark(w), this.bookmarkIntervalMs));
  }

  /** A change as a watch with a selector sees it (kube-apiserver's cacheWatcher rules). */
  private deliver(w: Watch, c: Change): void {
    const was = c.previous !== undefined && this.selects(w.store, w.selector, c.previous, w.namespace);
    const is = c.type !== 'DELETED' && this.selects(w.store, w.selector, c.object, w.namespace);
    if (c.type === 'DELETED') {
      if (was) this.emit(w, 'DELETED', c.object);
    } else if (is) this.emit(w, was || c.type === 'ADDED' ? c.type : 'ADDED', c.object);
    else if (was) this.emit(w, 'DELETED', { ...structuredClone(c.previous!), metadata: { ...metaOf(c.previous!), resourceVersion: String(c.rv) } });
  }

  private emit(w: Watch, type: string, o: JsonObject): void {
    const object = w.table ? this.table(w.store.kind, [o], metaOf(o).resourceVersion as string, !w.columnsSent) : o;
    w.columnsSent = true;
    w.res.write(JSON.stringify({ type, object }) + '\n');
  }

  private bookmark(w: Watch): void {
    const k = w.store.kind;
    w.res.write(JSON.stringify({ type: 'BOOKMARK', object: { kind: k.kind, apiVersion: apiVersionOf(k), metadata: { resourceVersion: String(this.rv), creationTimestamp: null }, ...(k.status ? { spec: {}, status: {} } : {}) } }) + '\n');
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

/** A body in a format other than JSON (kubectl sends built-in kinds as protobuf when it can): 415, as for a format the server does not know. */
function checkJsonBody(req: IncomingMessage): void {
  const type = (req.headers['content-type'] ?? 'application/json').split(';')[0].trim();
  if (type !== 'application/json' && type !== '*/*') throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json`);
}

/**
 * The OpenAPI v3 documents as far as kubectl reads them: the root (each
 * group version's document), and per group version each object path's PATCH
 * with its kind and the fieldValidation parameter, which tells kubectl apply
 * that the server validates (so it needs no schema of its own).
 */
function openApiV3(path: string): JsonObject | undefined {
  const gv = (k: KindSpec) => (k.group ? `apis/${k.group}/v1` : 'api/v1');
  if (path === '/openapi/v3') return { paths: Object.fromEntries([...new Set(KINDS.map(gv))].map((g) => [g, { serverRelativeURL: `/openapi/v3/${g}?hash=cni-ts` }])) };
  const m = /^\/openapi\/v3\/(api\/v1|apis\/[^/]+\/v1)$/.exec(path);
  if (!m) return undefined;
  const paths: JsonObject = {};
  for (const k of KINDS.filter((x) => gv(x) === m[1])) {
    const item = `/${gv(k)}${k.namespaced ? '/namespaces/{namespace}' : ''}/${k.resource}/{name}`;
    paths[item] = {
      patch: {
        'x-kubernetes-group-version-kind': { group: k.group, version: 'v1', kind: k.kind },
        parameters: [{ name: 'fieldValidation', in: 'query', schema: { type: 'string', uniqueItems: true } }],
      },
    };
  }
  return { openapi: '3.0.0', info: { title: 'Kubernetes', version: 'v1.32.0' }, paths };
}

/** Starts a stand-in API server (see KubeApiServerOptions); stop() it in afterAll. */
export function startKubeApiServer(opts: KubeApiServerOptions = {}): Promise<KubeApiServer> {
  return new KubeApiServer(opts).start();
}

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

const serializedObjects = new WeakMap<JsonObject, string>();
function serialized(o: JsonObject): string {
  let text = serializedObjects.get(o);
  if (text === undefined) serializedObjects.set(o, (text = JSON.stringify(o)));
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
