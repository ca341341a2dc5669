import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/**
 * A directory of its own for one server a test starts (its config, registry and store), removed when the test
 * ends, after `close` (which stops what writes there) has resolved: both in one teardown, whatever order tap
 * runs the test's teardowns in. Not t.testdir(): tap makes that one folder afresh on every call, so a test that
 * started a second server removed the first one's files while it still ran, and failed on a file it wrote
 * meanwhile (ENOTEMPTY).
 */
export function ownDir(t: { teardown(fn: () => unknown): void }, prefix: string, close: () => unknown = () => {}): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  t.teardown(async () => {
    try {
      await close()
    } finally {
      rmSync(dir, { recursive: true, force: true, maxRetries: 3 })
    }
  })
  return dir
}
