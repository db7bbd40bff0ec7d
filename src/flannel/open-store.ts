// Opens the lease store the flags ask for. The backends are loaded only here,
// on demand: the etcd client (grpc) only when etcd is asked for.
import { DEFAULT_LEASE_DIR, type LeaseStore, type StoreOptions } from './store';

/** Opens the store the flags ask for; the etcd client is loaded only here. */
export async function openStore(opts: StoreOptions): Promise<LeaseStore> {
  if (opts.etcdEndpoints && opts.etcdEndpoints.length > 0) {
    const { EtcdStore } = await import('./etcd-store');
    return EtcdStore.open(opts);
  }
  const { FileStore } = await import('./file-store');
  return new FileStore(opts.leaseDir ?? DEFAULT_LEASE_DIR);
}
