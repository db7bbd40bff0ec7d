// The same probe as probe-ours.ts with @kubernetes/client-node (the
// library the issue names), used as its README shows.
import { CoreV1Api, KubeConfig, Watch } from '@kubernetes/client-node';

async function main() {
  const loadedMs = performance.now();
  const kc = new KubeConfig();
  kc.loadFromFile(process.argv[2]);
  const list = await kc.makeApiClient(CoreV1Api).listNode();
  const listedMs = performance.now();
  let abort;
  abort = await new Watch(kc).watch(
    '/api/v1/nodes',
    { resourceVersion: String(Number(list.metadata.resourceVersion) - 1), allowWatchBookmarks: true, timeoutSeconds: 60 },
    () => {
      const watchingMs = performance.now();
      process.stdout.write(JSON.stringify({ nodes: list.items.length, loadedMs, listedMs, watchingMs, maxRssKB: process.resourceUsage().maxRSS }) + '\n');
      abort?.abort();
      process.exit(0);
    },
    () => {},
  );
}

void main();
