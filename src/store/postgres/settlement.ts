/** The settlement books on PostgreSQL (store/settlement.ts): NUMERIC neuron, added in the database, exactly. */
import { settlementRowOf, type SettledRecord, type SettlementRow, type SettlementStore, type SettlementText } from '../settlement.js'
import type { PgConnection } from './connection.js'

export const SETTLEMENT_MIGRATION = `
  CREATE TABLE provider_settlement (
    provider      text PRIMARY KEY,
    served        NUMERIC(78,0) NOT NULL DEFAULT 0 CHECK (served >= 0),
    settled       NUMERIC(78,0) NOT NULL DEFAULT 0 CHECK (settled >= 0),
    last_balance  NUMERIC(78,0) CHECK (last_balance >= 0),
    flagged       boolean NOT NULL DEFAULT false
  );
`

/** The block the balance was read at, written with it (the events counted into settled end there). */
export const SETTLEMENT_LAST_BLOCK_MIGRATION = `
  ALTER TABLE provider_settlement ADD COLUMN last_block bigint CHECK (last_block >= 0);
  ALTER TABLE provider_settlement ADD COLUMN last_pending_refund NUMERIC(78,0) CHECK (last_pending_refund >= 0);
`

/**
 * A provider's served is provider_settlement.served (what replicas gone were served, and everything before
 * migration 9) plus each live replica's provider_served row, written by the charges themselves (charge-batch.ts).
 */
const SETTLEMENT_SQL = {
  rows: `SELECT provider, (coalesce(s.served, 0) + coalesce(r.served, 0))::text AS served, coalesce(s.settled, 0)::text AS settled,
      s.last_balance::text AS last_balance, s.last_block::text AS last_block, s.last_pending_refund::text AS last_pending_refund,
      coalesce(s.flagged, false) AS flagged
    FROM provider_settlement s FULL JOIN (SELECT provider, sum(served) AS served FROM provider_served GROUP BY provider) r USING (provider)
    ORDER BY provider`,
  clearFlag: `UPDATE provider_settlement p SET flagged = false,
      settled = p.served + coalesce((SELECT sum(served) FROM provider_served r WHERE r.provider = p.provider), 0)
    WHERE provider = $1 AND flagged`,
} as const

export class PgSettlement implements SettlementStore {
  readonly #conn: PgConnection

  constructor(conn: PgConnection) {
    this.#conn = conn
  }

  async rows(): Promise<SettlementRow[]> {
    const { rows } = await this.#conn.query<SettlementText>(SETTLEMENT_SQL.rows)
    return rows.map(settlementRowOf)
  }

  async record(provider: string, r: SettledRecord): Promise<void> {
    await this.#conn.query(
      `INSERT INTO provider_settlement (provider, settled, last_balance, last_block, last_pending_refund, flagged) VALUES ($1, $2::numeric, $3::numeric, $4::bigint, $5::numeric, $6)
       ON CONFLICT (provider) DO UPDATE SET settled = excluded.settled, last_balance = excluded.last_balance, last_block = excluded.last_block,
         last_pending_refund = excluded.last_pending_refund, flagged = excluded.flagged`,
      [provider, r.settled.toString(), r.lastBalance?.toString() ?? null, r.lastBlock?.toString() ?? null, r.lastPendingRefund?.toString() ?? null, r.flagged],
    )
  }

  async clearFlag(provider: string): Promise<boolean> {
    const { rowCount } = await this.#conn.query(SETTLEMENT_SQL.clearFlag, [provider])
    return (rowCount ?? 0) > 0
  }
}
