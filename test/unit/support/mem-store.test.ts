// MemStore, the store the daemon's unit tests run on, held to the contract
// every lease store meets (FileStore here too, EtcdStore against a real etcd in
// test/integration/flannel-etcd.test.ts): what the daemon tests prove on it holds for them.
import { MemStore } from '../../support/mem-store';
import { leaseStoreContract } from '../../support/store-contract';

leaseStoreContract('MemStore', async () => ({ store: new MemStore() }));
