/**
 * The SQLite store's files are this user's alone whatever the umask (issue 43, point 6): the database, its -wal
 * and -shm 0600, the directories it creates 0700; a database left 0644 by an older version is brought to 0600
 * when it is opened again.
 */
import t from 'tap'
import { chmodSync, existsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { parseUsd } from '../../src/billing/money.js'
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js'

const A = '0x' + 'a'.repeat(40)

const mode = (path: string): string => (statSync(path).mode & 0o777).toString(8).padStart(4, '0')

for (const umask of [0o022, 0o000]) {
  t.test(`umask ${umask.toString(8).padStart(3, '0')}: database, -wal, -shm 0600 and the directories made for them 0700`, async (t) => {
    const previous = process.umask(umask)
    t.teardown(() => void process.umask(previous))
    const root = t.testdir()
    const dir = join(root, 'state', 'db')
    const path = join(dir, 'svc.db')
    const store = await openSqliteStore({ path })
    t.teardown(() => store.close())
    // A write, so the WAL and the shared-memory file exist while the store is open.
    await store.ledger.addFunds(A, 'deposit', parseUsd('1')!, '', Date.now())
    t.ok(existsSync(path + '-wal') && existsSync(path + '-shm'), 'the WAL files exist')
    t.strictSame(
      { db: mode(path), wal: mode(path + '-wal'), shm: mode(path + '-shm'), dir: mode(dir), parent: mode(join(root, 'state')) },
      { db: '0600', wal: '0600', shm: '0600', dir: '0700', parent: '0700' },
    )
  })
}

t.test('a database left readable by others (0644) is 0600 once opened again, its WAL files too', async (t) => {
  const previous = process.umask(0o022)
  t.teardown(() => void process.umask(previous))
  const path = join(t.testdir(), 'svc.db')
  const first = await openSqliteStore({ path })
  await first.ledger.addFunds(A, 'deposit', parseUsd('1')!, '', Date.now())
  await first.close()
  chmodSync(path, 0o644)
  const store = await openSqliteStore({ path })
  t.teardown(() => store.close())
  await store.ledger.addFunds(A, 'deposit', parseUsd('1')!, '', Date.now())
  t.strictSame({ db: mode(path), wal: mode(path + '-wal'), shm: mode(path + '-shm') }, { db: '0600', wal: '0600', shm: '0600' })
})
