// One probe of compare.mjs: what the daemon's kube subnet
// manager does first with our client (load a kubeconfig, list the Nodes, open
// a watch and get its first event), timed from process start; prints JSON.
import { loadKubeConnection } from '../../../src/flannel/kube/config';
import { KubeClient } from '../../../src/flannel/kube/client';

async function main(): Promise<void> {
  const loadedMs = performance.now();
  const client = new KubeClient(await loadKubeConnection({ kubeconfigFile: process.argv[2] }));
  const list = await client.listNodes();
  const listedMs = performance.now();
  // from just before the list's last change: the server replays that one change at once
  const watch = client.watchNodes(String(Number(list.resourceVersion) - 1), () => {
    const watchingMs = performance.now();
    watch.stop();
    client.close();
    process.stdout.write(JSON.stringify({ nodes: list.items.length, loadedMs, listedMs, watchingMs, maxRssKB: process.resourceUsage().maxRSS }) + '\n');
  }, 60);
  await watch.done;
}

void main();
