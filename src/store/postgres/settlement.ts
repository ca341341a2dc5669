/** The settlement books on PostgreSQL (store/settlement.ts): NUMERIC neuron, added in the database, exactly. */
import type { SettlementRow, SettlementStore } from '../settlement.js'
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

interface Row {
  provider: string
  served: string
  settled: string
  last_balance: string | null
  flagged: boolean
}

export class PgSettlement implements SettlementStore {
  readonly #conn: PgConnection

  constructor(conn: PgConnection) {
    this.#conn = conn
  }

  async rows(): Promise<SettlementRow[]> {
    const { rows } = await this.#conn.query<Row>('SELECT provider, served::text, settled::text, last_balance::text, flagged FROM provider_settlement ORDER BY provider')
    return rows.map((r) => ({ provider: r.provider, served: BigInt(r.served), settled: BigInt(r.settled), lastBalance: r.last_balance === null ? null : BigInt(r.last_balance), flagged: r.flagged }))
  }

  async record(provider: string, settled: bigint, lastBalance: bigint | null, flagged: boolean): Promise<void> {
    await this.#conn.query(
      `INSERT INTO provider_settlement (provider, settled, last_balance, flagged) VALUES ($1, $2::numeric, $3::numeric, $4)
       ON CONFLICT (provider) DO UPDATE SET settled = excluded.settled, last_balance = excluded.last_balance, flagged = excluded.flagged`,
      [provider, settled.toString(), lastBalance === null ? null : lastBalance.toString(), flagged],
    )
  }

  async clearFlag(provider: string): Promise<boolean> {
    const { rowCount } = await this.#conn.query('UPDATE provider_settlement SET flagged = false, settled = served WHERE provider = $1', [provider])
    return (rowCount ?? 0) > 0
  }
}
