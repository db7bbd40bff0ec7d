// The etcd store's own logic, without an etcd: the client library (etcd3) is
// replaced by a fake that records what the store asks of it, or, where the
// real client's behaviour matters (timeouts), the real library talks to a
// local TCP server that never answers. Real etcd is in the integration tests.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EventEmitter } from 'node:events';

const lib = vi.hoisted(() => ({ fake: undefined as unknown }));
vi.mock('../../src/flannel/etcd-client', () => ({
  // vitest cannot load etcd3's .proto files as text the way the bundle does; the library finds them itself here
  loadEtcd3: async () => lib.fake ?? (await import('etcd3')),
}));

import { EtcdStore } from '../../src/flannel/etcd-store';

class FakeWatcher extends EventEmitter {
  cancelled = false;
  async cancel(): Promise<void> {
    this.cancelled = true;
  }
}

/** Records each watch the store creates: its request and the watcher handed back. */
class FakeEtcd3 {
  static last: FakeEtcd3;
  readonly watches: { prefix?: string; startRevision?: string; watcher: FakeWatcher }[] = [];
  constructor(readonly options: Record<string, unknown>) {
    FakeEtcd3.last = this;
  }
  watch() {
    const req: { prefix?: string; startRevision?: string } = {};
    const builder = {
      prefix: (p: string) => ((req.prefix = p), builder),
      startRevision: (r: string) => ((req.startRevision = String(r)), builder),
      create: async () => {
        const watcher = new FakeWatcher();
        this.watches.push({ ...req, watcher });
        return watcher;
      },
    };
    return builder;
  }
  close() {}
}

const open = (extra: Record<string, unknown> = {}) => EtcdStore.open({ etcdEndpoints: ['http://192.0.2.1:2379'], ...extra });
const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));

afterEach(() => {
  lib.fake = undefined;
});

describe('etcd store: watch', () => {
  it('starts at the revision after the caller\'s list, so a change between the list and the watch is replayed', async () => {
    lib.fake = { Etcd3: FakeEtcd3 };
    const store = await open();
    const stop = store.watch(() => {}, () => {}, '41');
    await tick();
    expect(FakeEtcd3.last.watches.map(({ prefix, startRevision }) => ({ prefix, startRevision }))).toEqual([
      { prefix: '/coreos.com/network/subnets/', startRevision: '42' },
    ]);
    stop();
    const stop2 = store.watch(() => {}, () => {});
    await tick();
    expect(FakeEtcd3.last.watches[1].startRevision).toBeUndefined(); // no list given: from now
    stop2();
  });
});
