// A collection of the API (Nodes, Pods, Namespaces, NetworkPolicies), kept
// up to date: list, then watch from the list's resourceVersion, as
// client-go's reflector does for an informer (flanneld's Node informer).
// - A watch that ends (the server's timeoutSeconds), breaks or goes silent is
//   opened again from the last resourceVersion seen (an event's or a
//   bookmark's), so nothing is missed and nothing is listed twice.
// - 410 Gone (that resourceVersion is out of the server's history, as an
//   ERROR event or an HTTP status) means changes were missed: list again,
//   and report the difference to the cache as changes (an object gone
//   meanwhile is reported DELETED).
// - Lists are read in pages (500 objects each, as client-go's pager), each
//   page cut down to what is kept before the next is read: the daemon never
//   holds thousands of whole Nodes or Pods at once. A continue token that expired
//   meanwhile (410) starts the list again from its first page.
// - Failures are retried with a bounded backoff (doubling up to maxMs, reset
//   once the watch delivers again), each reported to onError.
// - A watch that sends what the API never does (an event of the wrong shape,
//   an object without a name) may have lost events: listed again, as on 410.
//   An exception in a handler is reported to onError, never thrown into the
//   stream: a daemon that exits takes the node's networking changes with it.
import { KubeApiError, KubeClient, LIST_PAGE_SIZE, MALFORMED, WatchHandle } from './client';
import { keyOf, type KubeObject, type Resource } from './resource';

export type Change<T extends KubeObject> =
  | {
      type: 'ADDED' | 'MODIFIED';
      /** Its key: the name, or namespace/name for a namespaced object. */
      key: string;
      /** The object now, as `keep` cut it. */
      object: T;
      /** What the cache held of it before (MODIFIED). */
      previous?: T;
    }
  | {
      type: 'DELETED';
      key: string;
      /** Its last state: the watch's event's, else (a new list found it gone) what the cache held, if anything. */
      object?: T;
      previous?: T;
    };

export interface InformerHandlers<T extends KubeObject> {
  /** An object appeared, changed or went (also as found by a new list). */
  onChange(change: Change<T>): void;
  /** A list or watch failed; it is retried. */
  onError(err: Error): void;
  /** Listing again, and why (the watch's resourceVersion expired). */
  onRelist?(why: string): void;
}

export interface InformerOptions<T extends KubeObject> {
  /** Retry delays: from initialMs, doubling, at most maxMs (default 250 ms to 2 s). */
  backoff?: { initialMs: number; maxMs: number };
  /** How long the server keeps one watch open (default 5 to 10 min, random, as client-go). */
  watchTimeoutS?: () => number;
  /**
   * What of an object is kept (and reported): the parts the caller reads. A
   * kubelet's Node carries its images, capacity and conditions, rewritten
   * every few seconds, a Pod its containers' status; kept whole for
   * thousands of them they are most of the daemon's memory. Its metadata's
   * name, namespace and resourceVersion must stay. Default: the whole object.
   */
  keep?: (item: T) => T;
  /**
   * What the cache holds of a kept object once its change was reported (and
   * what comes back as `previous`), given what it held before; undefined:
   * its key alone, all a watch needs (a caller that keeps its own record of
   * each object). Without its resourceVersion a new list reports it as
   * MODIFIED. Default: the kept object.
   */
  retain?: (item: T, previous: T | undefined) => T | undefined;
  /** Objects per list page (default 500). */
  pageSize?: number;
}

export class Informer<T extends KubeObject> {
  private readonly cache = new Map<string, T | undefined>();
  private rv = '';
  private stopped = false;
  private current?: WatchHandle;
  private wake?: () => void;
  private failures = 0;
  private readonly backoff: { initialMs: number; maxMs: number };
  private readonly watchTimeoutS: () => number;
  private readonly keep: (item: T) => T;
  private readonly pageSize: number;
  private readonly retain: (item: T, previous: T | undefined) => T | undefined;

  constructor(
    private readonly client: KubeClient,
    readonly resource: Resource,
    private readonly handlers: InformerHandlers<T>,
    opts: InformerOptions<T> = {},
  ) {
    this.backoff = opts.backoff ?? { initialMs: 250, maxMs: 2000 };
    this.watchTimeoutS = opts.watchTimeoutS ?? (() => 300 + Math.floor(Math.random() * 300));
    this.keep = opts.keep ?? ((n) => n);
    this.pageSize = opts.pageSize ?? LIST_PAGE_SIZE;
    this.retain = opts.retain ?? ((n) => n);
  }

  /**
   * Lists the collection (retrying until it works or stop() is called) and
   * keeps watching in the background. Resolves once the first list is in:
   * objects() is complete from then on. The first list's objects are
   * reported as ADDED.
   */
  async start(): Promise<void> {
    while (!this.stopped && !(await this.list())) await this.pause();
    void this.run();
  }

  /** The objects as last seen (what `retain` keeps of them: undefined for a key alone), by key. */
  objects(): ReadonlyMap<string, T | undefined> {
    return this.cache;
  }

  /** The resourceVersion the watch resumes from. */
  get resourceVersion(): string {
    return this.rv;
  }

  stop(): void {
    this.stopped = true;
    this.current?.stop();
    this.wake?.();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      this.current = this.client.watch<T>(this.resource, this.rv, (e) => this.apply(e.type, e.object), this.watchTimeoutS());
      try {
        await this.current.done;
      } catch (err) {
        if (this.stopped) return;
        if (err instanceof KubeApiError && (err.status === 410 || err.reason === MALFORMED)) {
          this.handlers.onRelist?.(err.message);
          while (!this.stopped && !(await this.list())) await this.pause();
        } else {
          this.handlers.onError(err as Error);
          await this.pause();
        }
      }
    }
  }

  /** One list into the cache, page by page; false (reported) when it failed. */
  private async list(): Promise<boolean> {
    const listed = new Map<string, T>();
    let rv: string;
    try {
      rv = await this.client.eachPage<T>(
        this.resource,
        this.pageSize,
        (page) => {
          for (const item of page.items) {
            const k = keyOf(this.resource, item); // an object without a name names nothing
            if (k !== undefined) listed.set(k, this.keep(item));
          }
        },
        (why) => {
          listed.clear();
          this.handlers.onRelist?.(`the list's continue token expired (${why}): listing from the first page again`);
        },
      );
    } catch (err) {
      this.handlers.onError(err as Error);
      return false;
    }
    if (this.stopped) return true;
    this.failures = 0;
    for (const [key, object] of listed) {
      const had = this.cache.has(key);
      const previous = this.cache.get(key);
      this.cache.set(key, this.retain(object, previous));
      if (!had) this.report({ type: 'ADDED', key, object });
      else if (previous?.metadata.resourceVersion !== object.metadata.resourceVersion) this.report({ type: 'MODIFIED', key, object, previous });
    }
    for (const [key, previous] of this.cache) {
      if (listed.has(key)) continue;
      this.cache.delete(key);
      this.report({ type: 'DELETED', key, object: previous, previous });
    }
    this.rv = rv;
    return true;
  }

  /** One event of the watch; throws (the client takes the watch as broken) when its object has no name. */
  private apply(type: string, item: T): void {
    if (this.stopped) return;
    this.failures = 0;
    const meta = (item as { metadata?: unknown }).metadata;
    const rv = typeof meta === 'object' && meta && (meta as { resourceVersion?: unknown }).resourceVersion;
    if (type === 'BOOKMARK') {
      if (typeof rv === 'string' && rv) this.rv = rv;
      return;
    }
    const key = keyOf(this.resource, item);
    if (key === undefined) throw new Error(`its object has no metadata.name${this.resource.namespaced ? ' or metadata.namespace' : ''}`);
    if (typeof rv === 'string' && rv) this.rv = rv;
    const object = this.keep(item);
    const had = this.cache.has(key);
    const previous = this.cache.get(key);
    if (type === 'DELETED') {
      this.cache.delete(key);
      this.report({ type: 'DELETED', key, object, previous });
      return;
    }
    this.cache.set(key, this.retain(object, previous));
    this.report(had ? { type: 'MODIFIED', key, object, previous } : { type: 'ADDED', key, object });
  }

  /** Hands a change over; what the handler throws is reported, not thrown into the list or the stream. */
  private report(change: Change<T>): void {
    try {
      this.handlers.onChange(change);
    } catch (err) {
      this.handlers.onError(new Error(`${this.resource.kind.toLowerCase()} ${JSON.stringify(change.key)} ${change.type.toLowerCase()}: ${(err as Error).message}`));
    }
  }

  /** Waits the next backoff step (cut short by stop()). */
  private pause(): Promise<void> {
    const ms = Math.min(this.backoff.maxMs, this.backoff.initialMs * 2 ** this.failures++);
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}
