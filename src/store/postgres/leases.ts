/**
 * Budget leases on PostgreSQL (store/leases.ts). Each lease is a row of `budget_leases` (replica, key), and its
 * amount is also counted in `accounts.leased` and `api_keys.leased`, so that "what is left" is one row's
 * arithmetic under that row's lock: never a read-then-write across statements. The functions below are
 * installed by the cluster migration (CLUSTER_MIGRATION) and run in one round trip each.
 *
 * Lock order, everywhere (grant, give back, charge, release of a dead replica's leases): the account row,
 * then the key row, then the lease row. A key row is only ever locked by a transaction that holds its
 * account's row (a batch of charges locks all its accounts, in id order, first), so no two transactions can
 * wait on each other in a cycle.
 *
 * A key's spend in its current reset period is `api_keys.period_used`, brought to the period the caller
 * names (`period_start`, epoch ms; 0 for `never`) from the journal itself whenever it differs, so a new day,
 * week or month, or a changed reset period, is always counted from the charges and never from a stale figure.
 */
import type { PgConnection } from './connection.js'
import type { LeaseAsk, LeaseGrant, LeaseStore } from '../leases.js'

export const CLUSTER_MIGRATION = `
ALTER TABLE accounts ADD COLUMN leased NUMERIC(78,0) NOT NULL DEFAULT 0 CHECK (leased >= 0);
ALTER TABLE api_keys ADD COLUMN period_start BIGINT NOT NULL DEFAULT -1;
ALTER TABLE api_keys ADD COLUMN period_used NUMERIC(78,0) NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN leased NUMERIC(78,0) NOT NULL DEFAULT 0 CHECK (leased >= 0);

CREATE TABLE replicas (
  id TEXT PRIMARY KEY,
  started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  heartbeat_at TIMESTAMPTZ NOT NULL,
  applied_seq BIGINT NOT NULL DEFAULT 0,
  trusting BOOLEAN NOT NULL DEFAULT false,
  info TEXT NOT NULL DEFAULT ''
);

CREATE TABLE budget_leases (
  replica_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  account_id TEXT NOT NULL,
  amount NUMERIC(78,0) NOT NULL CHECK (amount >= 0),
  PRIMARY KEY (replica_id, key_id)
);
CREATE INDEX budget_leases_by_account ON budget_leases (account_id);

-- Brings the key's period_used to the period starting at ps (the caller holds the key row's lock), from the
-- daily roll-up (periods start at 00:00 UTC, so whole days; it is written in each charge's own transaction).
CREATE FUNCTION svc_key_period(k TEXT, ps BIGINT) RETURNS VOID LANGUAGE sql AS $$
  UPDATE api_keys SET period_start = ps,
    period_used = (SELECT COALESCE(sum(cost), 0) FROM usage_daily
      WHERE key_id = k AND day >= to_char(to_timestamp(ps / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD'))
  WHERE id = k AND period_start <> ps;
$$;

-- Grants between min_amt and want of what the account and the key have left to replica r; 0 when not even
-- min_amt fits (nothing taken). Returns the figures before the grant, for the 402's message.
CREATE FUNCTION svc_lease_acquire(r TEXT, a TEXT, k TEXT, ps BIGINT, min_amt NUMERIC, want NUMERIC)
RETURNS TABLE (granted NUMERIC, account_room NUMERIC, key_limit NUMERIC, key_used NUMERIC, key_leased NUMERIC)
LANGUAGE plpgsql AS $$
DECLARE
  acc_room NUMERIC;
  lim NUMERIC; used NUMERIC; held NUMERIC;
  room NUMERIC;
  g NUMERIC := 0;
BEGIN
  -- Only a registered replica takes leases: the reaper releases exactly the leases of replicas not registered.
  PERFORM 1 FROM replicas WHERE id = r FOR SHARE;
  IF NOT FOUND THEN RAISE EXCEPTION 'replica % is not registered', r USING ERRCODE = 'P0002'; END IF;
  SELECT deposited + credited - spent - accounts.leased INTO acc_room FROM accounts WHERE id = a FOR NO KEY UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'no account %', a USING ERRCODE = 'P0002'; END IF;
  PERFORM 1 FROM api_keys WHERE id = k AND account_id = a FOR NO KEY UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'no key % of account %', k, a USING ERRCODE = 'P0002'; END IF;
  PERFORM svc_key_period(k, ps);
  SELECT credit_limit, period_used, api_keys.leased INTO lim, used, held FROM api_keys WHERE id = k;
  room := acc_room;
  IF lim IS NOT NULL AND lim - used - held < room THEN room := lim - used - held; END IF;
  IF room >= min_amt AND min_amt > 0 THEN
    g := LEAST(want, room);
    UPDATE accounts SET leased = accounts.leased + g WHERE id = a;
    UPDATE api_keys SET leased = api_keys.leased + g WHERE id = k;
    INSERT INTO budget_leases (replica_id, key_id, account_id, amount) VALUES (r, k, a, g)
      ON CONFLICT (replica_id, key_id) DO UPDATE SET amount = budget_leases.amount + EXCLUDED.amount;
  END IF;
  RETURN QUERY SELECT g, acc_room, lim, used, held;
END $$;

-- Gives back up to amt of replica r's lease on key k (never more than the lease holds).
CREATE FUNCTION svc_lease_return(r TEXT, a TEXT, k TEXT, amt NUMERIC) RETURNS NUMERIC LANGUAGE plpgsql AS $$
DECLARE have NUMERIC; back NUMERIC;
BEGIN
  PERFORM 1 FROM accounts WHERE id = a FOR NO KEY UPDATE;
  PERFORM 1 FROM api_keys WHERE id = k FOR NO KEY UPDATE;
  SELECT amount INTO have FROM budget_leases WHERE replica_id = r AND key_id = k FOR UPDATE;
  IF NOT FOUND THEN RETURN 0; END IF;
  back := LEAST(have, amt);
  UPDATE accounts SET leased = leased - back WHERE id = a;
  UPDATE api_keys SET leased = leased - back WHERE id = k;
  IF have - back = 0 THEN DELETE FROM budget_leases WHERE replica_id = r AND key_id = k;
  ELSE UPDATE budget_leases SET amount = have - back WHERE replica_id = r AND key_id = k; END IF;
  RETURN back;
END $$;

-- Pays a charge of cost on key k: out of replica r's lease when it holds that much ('lease'), else out of what
-- the account has left beyond acc_extra (the room earlier charges of the same batch took: accounts.spent
-- counts them only once the batch is appended) and the key has left ('room'), else not at all ('none': the
-- charge must not be written). Counts it in the key's period spend at once. The caller appends the journal
-- row and adds accounts.spent in the same transaction, after.
CREATE FUNCTION svc_lease_pay(r TEXT, a TEXT, k TEXT, ps BIGINT, cost NUMERIC, acc_extra NUMERIC)
RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE have NUMERIC; acc_room NUMERIC; lim NUMERIC; used NUMERIC; held NUMERIC;
BEGIN
  SELECT deposited + credited - spent - leased INTO acc_room FROM accounts WHERE id = a FOR NO KEY UPDATE;
  IF NOT FOUND THEN RETURN 'none'; END IF;
  PERFORM 1 FROM api_keys WHERE id = k FOR NO KEY UPDATE;
  PERFORM svc_key_period(k, ps);
  SELECT amount INTO have FROM budget_leases WHERE replica_id = r AND key_id = k FOR UPDATE;
  IF FOUND AND have >= cost THEN
    UPDATE accounts SET leased = leased - cost WHERE id = a;
    UPDATE api_keys SET leased = leased - cost, period_used = period_used + cost WHERE id = k;
    IF have = cost THEN DELETE FROM budget_leases WHERE replica_id = r AND key_id = k;
    ELSE UPDATE budget_leases SET amount = have - cost WHERE replica_id = r AND key_id = k; END IF;
    RETURN 'lease';
  END IF;
  SELECT credit_limit, period_used, leased INTO lim, used, held FROM api_keys WHERE id = k;
  IF acc_room - acc_extra < cost OR (lim IS NOT NULL AND lim - used - held < cost) THEN RETURN 'none'; END IF;
  UPDATE api_keys SET period_used = period_used + cost WHERE id = k;
  RETURN 'room';
END $$;

-- Pays each leased charge of a batch in order (svc_lease_pay), skipping requests already billed (their append is
-- skipped too). A charge nothing can pay raises 'svc: lease lost' with its request id as DETAIL: the caller
-- writes the batch again without it (rare: a replica presumed dead while it was still serving).
CREATE FUNCTION svc_lease_pay_all(r TEXT, rid TEXT[], a TEXT[], k TEXT[], ps BIGINT[], cost NUMERIC[]) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
  room_a JSONB := '{}';
  how TEXT;
  n INTEGER := 0;
BEGIN
  FOR i IN 1 .. coalesce(array_length(rid, 1), 0) LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM journal WHERE kind = 'charge' AND request_id = rid[i]);
    how := svc_lease_pay(r, a[i], k[i], ps[i], cost[i], coalesce((room_a ->> a[i])::numeric, 0));
    IF how = 'none' THEN
      RAISE EXCEPTION 'svc: lease lost' USING ERRCODE = 'P0001', DETAIL = rid[i];
    END IF;
    IF how = 'room' THEN
      room_a := jsonb_set(room_a, ARRAY[a[i]], to_jsonb(coalesce((room_a ->> a[i])::numeric, 0) + cost[i]));
    END IF;
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;

-- Releases every lease whose replica is no longer registered (reaped, or gone without a goodbye).
CREATE FUNCTION svc_release_orphan_leases() RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE l RECORD; n INTEGER := 0;
BEGIN
  FOR l IN SELECT bl.replica_id, bl.key_id, bl.account_id FROM budget_leases bl
      WHERE NOT EXISTS (SELECT 1 FROM replicas WHERE id = bl.replica_id) ORDER BY bl.account_id, bl.key_id LOOP
    PERFORM svc_lease_return(l.replica_id, l.account_id, l.key_id, 'Infinity'::numeric);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
`

/**
 * Migration 4: svc_lease_pay_all pays the batch key by key. Charge by charge, a batch of n charges on one key
 * updated the same account, key and lease rows n times in one transaction, each update a new version of the
 * row that the next one had to find past the others: at 64 connections on one replica a batch of ~26
 * charges took ~6 ms of the backend's time (one batch in flight at a time, so that was the throughput).
 * When this replica's lease on a key covers the total of the batch's charges on it (one account, one period:
 * the usual case), that key's charges are paid with one update of each row; whatever no lease covers whole
 * is paid charge by charge as before, in batch order. The room a charge may take from the account (when no
 * lease pays it) now discounts every earlier charge of the batch on that account, paid by a lease or not:
 * accounts.spent counts them only at the append, while a lease payment already took them out of `leased`.
 */
export const LEASE_PAY_BY_KEY_MIGRATION = `
CREATE OR REPLACE FUNCTION svc_lease_pay_all(r TEXT, rid TEXT[], a TEXT[], k TEXT[], ps BIGINT[], cost NUMERIC[]) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
  g RECORD;
  have NUMERIC;
  whole TEXT[] := '{}';
  taken JSONB := '{}';
  how TEXT;
  n INTEGER := 0;
  billed TEXT[] := '{}';
BEGIN
  -- The requests billed already (skipped, as the append skips them), one probe of the unique index each: a
  -- join, or request_id = ANY (rid), was planned as a scan of the whole journal (EXPLAIN, 3,841 rows).
  FOR i IN 1 .. coalesce(array_length(rid, 1), 0) LOOP
    IF EXISTS (SELECT 1 FROM journal WHERE kind = 'charge' AND request_id = rid[i]) THEN billed := billed || rid[i]; END IF;
  END LOOP;
  FOR g IN
    SELECT c.key_id, min(c.account_id) AS account_id, count(DISTINCT c.account_id) AS accounts, min(c.period) AS period,
      count(DISTINCT c.period) AS periods, sum(c.amount) AS total, count(*)::integer AS charges
    FROM unnest(rid, a, k, ps, cost) AS c(request_id, account_id, key_id, period, amount)
    WHERE c.request_id <> ALL (billed)
    GROUP BY c.key_id ORDER BY c.key_id
  LOOP
    CONTINUE WHEN g.accounts <> 1 OR g.periods <> 1;
    PERFORM 1 FROM accounts WHERE id = g.account_id FOR NO KEY UPDATE;
    CONTINUE WHEN NOT FOUND;
    PERFORM 1 FROM api_keys WHERE id = g.key_id FOR NO KEY UPDATE;
    PERFORM svc_key_period(g.key_id, g.period);
    SELECT amount INTO have FROM budget_leases WHERE replica_id = r AND key_id = g.key_id FOR UPDATE;
    CONTINUE WHEN NOT FOUND OR have < g.total;
    UPDATE accounts SET leased = leased - g.total WHERE id = g.account_id;
    UPDATE api_keys SET leased = leased - g.total, period_used = period_used + g.total WHERE id = g.key_id;
    IF have = g.total THEN DELETE FROM budget_leases WHERE replica_id = r AND key_id = g.key_id;
    ELSE UPDATE budget_leases SET amount = have - g.total WHERE replica_id = r AND key_id = g.key_id; END IF;
    whole := whole || g.key_id;
    taken := jsonb_set(taken, ARRAY[g.account_id], to_jsonb(coalesce((taken ->> g.account_id)::numeric, 0) + g.total));
    n := n + g.charges;
  END LOOP;
  FOR i IN 1 .. coalesce(array_length(rid, 1), 0) LOOP
    CONTINUE WHEN k[i] = ANY (whole) OR rid[i] = ANY (billed);
    how := svc_lease_pay(r, a[i], k[i], ps[i], cost[i], coalesce((taken ->> a[i])::numeric, 0));
    IF how = 'none' THEN
      RAISE EXCEPTION 'svc: lease lost' USING ERRCODE = 'P0001', DETAIL = rid[i];
    END IF;
    taken := jsonb_set(taken, ARRAY[a[i]], to_jsonb(coalesce((taken ->> a[i])::numeric, 0) + cost[i]));
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
`

/**
 * Migration 5: svc_key_period in PL/pgSQL. As a LANGUAGE sql function that is not inlined (it returns VOID
 * and writes), PostgreSQL 15 parses, analyses and plans its body on every call (fmgr_sql keeps a plan only
 * for the statement that called it): once per leased key of every charge batch and every lease taken, about
 * 0.11 ms each (pg_stat_user_functions, 744 calls). PL/pgSQL keeps the statement's plan for the session.
 * Same statement, same effect.
 */
export const KEY_PERIOD_PLPGSQL_MIGRATION = `
CREATE OR REPLACE FUNCTION svc_key_period(k TEXT, ps BIGINT) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
  UPDATE api_keys SET period_start = ps,
    period_used = (SELECT COALESCE(sum(cost), 0) FROM usage_daily
      WHERE key_id = k AND day >= to_char(to_timestamp(ps / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD'))
  WHERE id = k AND period_start <> ps;
END $$;
`

export const LEASE_SQL = {
  /** The leased charges of a batch, paid inside its transaction after the account locks, before the append. */
  payAll: 'SELECT svc_lease_pay_all($1, $2::text[], $3::text[], $4::text[], $5::bigint[], $6::numeric[]) AS paid',
  acquire: 'SELECT granted, account_room, key_limit, key_used, key_leased FROM svc_lease_acquire($1, $2, $3, $4, $5, $6)',
  giveBack: 'SELECT svc_lease_return($1, $2, $3, $4)',
} as const

interface GrantRow {
  granted: string
  account_room: string
  key_limit: string | null
  key_used: string
  key_leased: string
}

export class PgLeaseStore implements LeaseStore {
  readonly replicaId: string
  readonly #pool: PgConnection

  constructor(pool: PgConnection, replicaId: string) {
    this.#pool = pool
    this.replicaId = replicaId
  }

  async acquire(ask: LeaseAsk): Promise<LeaseGrant> {
    const { rows } = await this.#pool.query<GrantRow>(LEASE_SQL.acquire, [
      this.replicaId,
      ask.accountId,
      ask.keyId,
      ask.periodStart,
      ask.min.toString(),
      ask.want.toString(),
    ])
    const row = rows[0]!
    return {
      granted: BigInt(row.granted),
      accountRoom: BigInt(row.account_room),
      keyLimit: row.key_limit === null ? null : BigInt(row.key_limit),
      keyUsed: BigInt(row.key_used),
      keyLeased: BigInt(row.key_leased),
    }
  }

  async giveBack(accountId: string, keyId: string, amount: bigint | null): Promise<void> {
    await this.#pool.query(LEASE_SQL.giveBack, [this.replicaId, accountId, keyId, amount === null ? 'Infinity' : amount.toString()])
  }

}
