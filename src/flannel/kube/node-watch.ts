// Every Node, kept up to date: list, then watch from the list's
// resourceVersion, as client-go's reflector does for flanneld's informer.
// - A watch that ends (the server's timeoutSeconds), breaks or goes silent is
//   opened again from the last resourceVersion seen (an event's or a
//   bookmark's), so nothing is missed and nothing is listed twice.
// - 410 Gone (that resourceVersion is out of the server's history, as an
//   ERROR event or an HTTP status) means changes were missed: list again,
//   and report the difference to the cache as changes (a Node gone
//   meanwhile is reported DELETED).
// - Lists are read in pages (500 Nodes each, as client-go's pager), each
//   page cut down to what is kept before the next is read: the daemon never
//   holds thousands of whole Nodes at once. A continue token that expired
//   meanwhile (410) starts the list again from its first page.
// - Failures are retried with a bounded backoff (doubling up to maxMs, reset
//   once the watch delivers again), each reported to onError.
// - A watch that sends what the API never does (an event of the wrong shape,
//   an object without a name) may have lost events: listed again, as on 410.
//   An exception in a handler is reported to onError, never thrown into the
//   stream: a daemon that exits takes the node's networking changes with it.
import { KubeApiError, KubeClient, LIST_PAGE_SIZE, MALFORMED, WatchHandle } from './client';
import type { KubeNode } from './node';

export interface NodeChange {
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** The Node now (DELETED: its last state). */
  node: KubeNode;
  /** The Node as it was before (MODIFIED, DELETED). */
  previous?: KubeNode;
}

export interface NodeWatchHandlers {
  /** A Node appeared, changed or went (also as found by a new list). */
  onChange(change: NodeChange): void;
  /** A list or watch failed; it is retried. */
  onError(err: Error): void;
  /** Listing again, and why (the watch's resourceVersion expired). */
  onRelist?(why: string): void;
}

export interface NodeWatchOptions {
  /** Retry delays: from initialMs, doubling, at most maxMs (default 250 ms to 2 s). */
  backoff?: { initialMs: number; maxMs: number };
  /** How long the server keeps one watch open (default 5 to 10 min, random, as client-go). */
  watchTimeoutS?: () => number;
  /**
   * What of a Node is kept (and reported): the parts the caller reads. A
   * kubelet's Node carries its images, capacity and conditions, rewritten
   * every few seconds; kept whole for thousands of Nodes they are most of the
   * daemon's memory. Default: the whole Node.
   */
  keep?: (node: KubeNode) => KubeNode;
  /**
   * What the cache holds of a kept Node once its change was reported (and
   * what comes back as `previous`): its name and resourceVersion are all a
   * list or a watch needs. Default: the kept Node.
   */
  retain?: (node: KubeNode) => KubeNode;
  /** Nodes per list page (default 500). */
  pageSize?: number;
}

/** An object's metadata.name, when it has a non-empty one. */
function nameOf(item: unknown): string | undefined {
  const meta = (item as { metadata?: unknown }).metadata;
  const n = typeof meta === 'object' && meta ? (meta as { name?: unknown }).name : undefined;
  return typeof n === 'string' && n ? n : undefined;
}

export class NodeWatch {
  private readonly cache = new Map<string, KubeNode>();
  private rv = '';
  private stopped = false;
  private current?: WatchHandle;
  private wake?: () => void;
  private failures = 0;
  private readonly backoff: { initialMs: number; maxMs: number };
  private readonly watchTimeoutS: () => number;
  private readonly keep: (node: KubeNode) => KubeNode;
  private readonly pageSize: number;
  private readonly retain: (node: KubeNode) => KubeNode;

  constructor(
    private readonly client: KubeClient,
    private readonly handlers: NodeWatchHandlers,
    opts: NodeWatchOptions = {},
  ) {
    this.backoff = opts.backoff ?? { initialMs: 250, maxMs: 2000 };
    this.watchTimeoutS = opts.watchTimeoutS ?? (() => 300 + Math.floor(Math.random() * 300));
    this.keep = opts.keep ?? ((n) => n);
    this.pageSize = opts.pageSize ?? LIST_PAGE_SIZE;
    this.retain = opts.retain ?? ((n) => n);
  }

  /**
   * Lists the Nodes (retrying until it works or stop() is called) and keeps
   * watching in the background. Resolves once the first list is in: nodes()
   * is complete from then on. The first list's Nodes are reported as ADDED.
   */
  async start(): Promise<void> {
    while (!this.stopped && !(await this.list())) await this.pause();
    void this.run();
  }

  /** The Nodes as last seen (what `retain` keeps of them), by name. */
  nodes(): ReadonlyMap<string, KubeNode> {
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
      this.current = this.client.watchNodes(this.rv, (e) => this.apply(e.type, e.object), this.watchTimeoutS());
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
    const listed = new Map<string, KubeNode>();
    let rv: string;
    try {
      rv = await this.client.eachNodePage(
        this.pageSize,
        (page) => {
          for (const item of page.items) {
            const n = nameOf(item); // a Node without a name cannot be anyone's peer
            if (n !== undefined) listed.set(n, this.keep(item));
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
    for (const [n, node] of listed) {
      const previous = this.cache.get(n);
      this.cache.set(n, this.retain(node));
      if (!previous) this.report({ type: 'ADDED', node });
      else if (previous.metadata.resourceVersion !== node.metadata.resourceVersion) this.report({ type: 'MODIFIED', node, previous });
    }
    for (const [n, previous] of this.cache) {
      if (listed.has(n)) continue;
      this.cache.delete(n);
      this.report({ type: 'DELETED', node: previous, previous });
    }
    this.rv = rv;
    return true;
  }

  /** One event of the watch; throws (the client takes the watch as broken) when its object has no name. */
  private apply(type: string, item: KubeNode): void {
    if (this.stopped) return;
    this.failures = 0;
    const meta = (item as { metadata?: unknown }).metadata;
    const rv = typeof meta === 'object' && meta && (meta as { resourceVersion?: unknown }).resourceVersion;
    if (type === 'BOOKMARK') {
      if (typeof rv === 'string' && rv) this.rv = rv;
      return;
    }
    const n = nameOf(item);
    if (n === undefined) throw new Error('its object has no metadata.name');
    if (typeof rv === 'string' && rv) this.rv = rv;
    const node = this.keep(item);
    const previous = this.cache.get(n);
    if (type === 'DELETED') {
      this.cache.delete(n);
      this.report({ type: 'DELETED', node, previous });
      return;
    }
    this.cache.set(n, this.retain(node));
    this.report(previous ? { type: 'MODIFIED', node, previous } : { type: 'ADDED', node });
  }

  /** Hands a change over; what the handler throws is reported, not thrown into the list or the stream. */
  private report(change: NodeChange): void {
    try {
      this.handlers.onChange(change);
    } catch (err) {
      this.handlers.onError(new Error(`node ${JSON.stringify(change.node.metadata.name)} ${change.type.toLowerCase()}: ${(err as Error).message}`));
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
