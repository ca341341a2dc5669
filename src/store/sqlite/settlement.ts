/** The settlement books on SQLite (store/settlement.ts): TEXT integers, added up with BigInt in one transaction. */
import type { SettledRecord, SettlementRow, SettlementStore } from '../settlement.js'
import type { SqliteConnection } from './connection.js'

interface Row {
  provider: string
  served: string
  settled: string
  last_balance: string | null
  last_block: string | null
  last_pending_refund: string | null
  flagged: number
}

export class SqliteSettlement implements SettlementStore {
  readonly #conn: SqliteConnection

  constructor(conn: SqliteConnection) {
    this.#conn = conn
  }

  async rows(): Promise<SettlementRow[]> {
    return this.#conn.db
      .prepare<[], Row>('SELECT * FROM provider_settlement ORDER BY provider')
      .all()
      .map((r) => ({
        provider: r.provider,
        served: BigInt(r.served),
        settled: BigInt(r.settled),
        lastBalance: r.last_balance === null ? null : BigInt(r.last_balance),
        lastBlock: r.last_block === null ? null : BigInt(r.last_block),
        lastPendingRefund: r.last_pending_refund === null ? null : BigInt(r.last_pending_refund),
        flagged: r.flagged === 1,
      }))
  }

  async record(provider: string, r: SettledRecord): Promise<void> {
    await this.#conn.writable()
    this.#conn.db
      .prepare<[string, string, string | null, string | null, string | null, number]>(
        `INSERT INTO provider_settlement (provider, settled, last_balance, last_block, last_pending_refund, flagged) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (provider) DO UPDATE SET settled = excluded.settled, last_balance = excluded.last_balance, last_block = excluded.last_block,
           last_pending_refund = excluded.last_pending_refund, flagged = excluded.flagged`,
      )
      .run(provider, r.settled.toString(), r.lastBalance?.toString() ?? null, r.lastBlock?.toString() ?? null, r.lastPendingRefund?.toString() ?? null, r.flagged ? 1 : 0)
  }

  async clearFlag(provider: string): Promise<boolean> {
    await this.#conn.writable()
    return this.#conn.db.prepare<[string]>('UPDATE provider_settlement SET flagged = 0, settled = served WHERE provider = ? AND flagged = 1').run(provider).changes > 0
  }
}
