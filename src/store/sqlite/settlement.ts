/** The settlement books on SQLite (store/settlement.ts): TEXT integers, added up with BigInt in one transaction. */
import { settlementRowOf, type SettledRecord, type SettlementRow, type SettlementStore, type SettlementText } from '../settlement.js'
import type { SqliteConnection } from './connection.js'

export class SqliteSettlement implements SettlementStore {
  readonly #conn: SqliteConnection

  constructor(conn: SqliteConnection) {
    this.#conn = conn
  }

  async rows(): Promise<SettlementRow[]> {
    return this.#conn.db
      .prepare<[], SettlementText>('SELECT * FROM provider_settlement ORDER BY provider')
      .all()
      .map(settlementRowOf)
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
