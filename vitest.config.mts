import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          // Tests wait for conditions (test/support/wait.ts, up to 20 s): room for a busy machine.
          testTimeout: 30_000,
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          // Files run one at a time: they create namespaces, bridges and
          // processes, and share the machine's kernel.
          fileParallelism: false,
          testTimeout: 60_000,
          hookTimeout: 60_000,
          globalSetup: ['test/integration/global-setup.ts'],
        },
      },
    ],
  },
});
