/**
 * The PostgreSQL schema, as numbered migrations applied in order at open under an advisory lock
 * (postgres/migrate.ts), so N processes starting at once on an empty database migrate exactly once. A migration
 * is never edited once released: change the schema by appending one.
 *
 * Money columns are NUMERIC(78,0): exact integers of atto-USD up to 10^78, far past 64 bits. They travel as
 * decimal strings to and from bigint; the database adds them only as NUMERIC (exact), never as float.
 * Timestamps are epoch ms in bigint columns, as the Store interface speaks them.
 */

import { CHARGE_BATCH_MIGRATION, FEWER_STATEMENTS_MIGRATION, LEASED_BATCH_MIGRATION } from './charge-batch.js'
import { CLUSTER_MIGRATION, KEY_PERIOD_PLPGSQL_MIGRATION, LEASE_PAY_BY_KEY_MIGRATION } from './leases.js'
import { RESPONSES_MIGRATION } from './responses.js'
import { SETTLEMENT_LAST_BLOCK_MIGRATION, SETTLEMENT_MIGRATION } from './settlement.js'

export interface Migration {
  readonly version: number
  readonly name: string
  readonly sql: string
}

/**
 * Rows of `changes` kept (the window that changes_ordered() trims on each insert: changing it takes a migration
 * that replaces the function). A listener whose last seq is further behind may have missed some and reports
 * one `unknown` change instead (postgres/changes.ts). Mirrors sqlite/migrations.ts CHANGES_KEPT.
 */
export const CHANGES_KEPT = 10_000

/**
 * Advisory lock keys (two int4: a class, then an object), scoped to the database by PostgreSQL itself. 0x5356
 * is "SV". The migration lock is held for a whole migrate(); the changes lock for each transaction that writes
 * a `changes` row, until its commit.
 */
export const LOCK_CLASS = 0x5356
export const MIGRATION_LOCK = 1
export const CHANGES_LOCK = 2

const money = (column: string, nullable = false): string =>
  `${column} NUMERIC(78,0) ${nullable ? '' : 'NOT NULL DEFAULT 0 '}CHECK (${column} >= 0)`

/** A check a trigger of migration 12 makes: its constraint's name and the rule, a boolean SQL expression of NEW. */
const SETTINGS_CHECKS: Readonly<Record<'accounts' | 'api_keys', readonly (readonly [name: string, rule: string])[]>> = {
  accounts: [
    ['accounts_id_check', "NEW.id ~ '^0x[0-9a-f]{40}$'"],
    ['accounts_rate_limit_check', 'NEW.rate_limit IS NULL OR NEW.rate_limit > 0'],
    ['accounts_deposited_check', 'NEW.deposited >= 0'],
    ['accounts_credited_check', 'NEW.credited >= 0'],
  ],
  api_keys: [
    ['api_keys_trust_mode_check', "NEW.trust_mode IN ('standard', 'verified', 'private')"],
    ['api_keys_credit_limit_check', 'NEW.credit_limit >= 0'],
    ['api_keys_reset_period_check', "NEW.reset_period IN ('never', 'daily', 'weekly', 'monthly')"],
    ['api_keys_allowed_models_check', 'cardinality(NEW.allowed_models) > 0'],
    ['api_keys_allowed_providers_check', 'cardinality(NEW.allowed_providers) > 0'],
  ],
}

/** The columns each table's checks read (what an UPDATE must set for its trigger to fire). */
const SETTINGS_COLUMNS = { accounts: 'id, rate_limit, deposited, credited', api_keys: 'trust_mode, credit_limit, reset_period, allowed_models, allowed_providers' } as const

/**
 * Migration 12: PostgreSQL evaluates every CHECK constraint of a table on each row version a statement writes,
 * and parses each one's expression again in every statement that writes the table. A batch of charges writes
 * only the counters (accounts.spent and leased, api_keys.leased and period_used) yet paid for nine checks on
 * columns it never writes: the account's id pattern, its rate limit and funds, the key's settings (pg-batch.ts,
 * those nine dropped in a throwaway database: about 20 us of ~370 of server CPU a batch of one). They become
 * a trigger per table that fires on INSERT and on an UPDATE that sets one of their columns: the same rules (as a
 * CHECK, a rule that is NULL passes), refused with the same SQLSTATE (23514) and constraint name. The checks on
 * the counters themselves (spent, leased >= 0) stay constraints: a batch writes those. Its text must stay what
 * it is (databases migrated ran it): change these checks in a migration of their own.
 */
const SETTINGS_CHECKED_WHEN_WRITTEN_MIGRATION = (['accounts', 'api_keys'] as const)
  .map((table) => {
    const checks = SETTINGS_CHECKS[table]
    const rules = checks
      .map(([name, rule]) => `  IF NOT (${rule}) THEN
    RAISE EXCEPTION 'new row for relation "${table}" violates check constraint "${name}"'
      USING ERRCODE = 'check_violation', CONSTRAINT = '${name}', TABLE = '${table}';
  END IF;`)
      .join('\n')
    return `
CREATE FUNCTION svc_${table}_settings_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
${rules}
  RETURN NEW;
END $$;
CREATE TRIGGER ${table}_settings_check BEFORE INSERT OR UPDATE OF ${SETTINGS_COLUMNS[table]} ON ${table}
  FOR EACH ROW EXECUTE FUNCTION svc_${table}_settings_check();
ALTER TABLE ${table} ${checks.map(([name]) => `DROP CONSTRAINT IF EXISTS ${name}`).join(', ')};
`
  })
  .join('')

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'accounts, keys, ledger, changes and jobs',
    sql: `
      CREATE TABLE accounts (
        id          text PRIMARY KEY CHECK (id ~ '^0x[0-9a-f]{40}$'),
        rate_limit  integer CHECK (rate_limit IS NULL OR rate_limit > 0),
        -- Running totals of the journal, updated in the same transaction as each entry (postgres/ledger.ts).
        ${money('deposited')},
        ${money('credited')},
        ${money('spent')},
        created_at  bigint NOT NULL
      );

      CREATE TABLE api_keys (
        id                 text PRIMARY KEY,
        account_id         text NOT NULL REFERENCES accounts(id),
        hash               text NOT NULL UNIQUE,
        preview            text NOT NULL,
        name               text NOT NULL,
        trust_mode         text CHECK (trust_mode IN ('standard', 'verified', 'private')),
        revoked_at         bigint,
        ${money('credit_limit', true)},
        reset_period       text NOT NULL DEFAULT 'never' CHECK (reset_period IN ('never', 'daily', 'weekly', 'monthly')),
        expires_at         bigint,
        allowed_models     text[] CHECK (cardinality(allowed_models) > 0),     -- NULL = unrestricted
        allowed_providers  text[] CHECK (cardinality(allowed_providers) > 0),  -- NULL = unrestricted
        created_at         bigint NOT NULL,
        ord                bigint GENERATED ALWAYS AS IDENTITY  -- creation order among equal created_at
      );
      CREATE INDEX api_keys_by_account ON api_keys (account_id, created_at, ord);

      CREATE TABLE mgmt_keys (
        id              text PRIMARY KEY,
        account_id      text NOT NULL REFERENCES accounts(id),
        hash            text NOT NULL UNIQUE,
        preview         text NOT NULL,
        name            text NOT NULL,
        scopes          text[] NOT NULL,
        revoked_at      bigint,
        created_at      bigint NOT NULL,
        last_used_at    bigint,
        last_source_ip  text,
        ord             bigint GENERATED ALWAYS AS IDENTITY
      );
      CREATE INDEX mgmt_keys_by_account ON mgmt_keys (account_id, created_at, ord);

      -- The ledger: append-only. A charge is one row carrying its usage, and a request is billed at most once.
      CREATE TABLE journal (
        seq                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        account_id         text NOT NULL REFERENCES accounts(id),
        kind               text NOT NULL CHECK (kind IN ('deposit', 'credit', 'charge')),
        amount             NUMERIC(78,0) NOT NULL CHECK (amount >= 0),
        request_id         text CHECK ((kind = 'charge') = (request_id IS NOT NULL)),
        key_id             text,
        memo               text NOT NULL DEFAULT '',
        created_at         bigint NOT NULL,
        -- Charges only (NULL on deposits and credits).
        model              text CHECK ((kind = 'charge') = (model IS NOT NULL)),
        provider           text,
        prompt_tokens      bigint,
        completion_tokens  bigint,
        images             bigint,
        audio_ms           bigint
      );
      CREATE UNIQUE INDEX journal_charge_per_request ON journal (request_id) WHERE kind = 'charge';
      -- Deposits and credits by account; an account's charges are an audit read that scans (no request path),
      -- and each charge writes one index entry fewer.
      CREATE INDEX journal_funds_by_account ON journal (account_id, seq) WHERE kind <> 'charge';
      CREATE FUNCTION journal_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION 'journal is append-only';
      END $$;
      CREATE TRIGGER journal_no_change BEFORE UPDATE OR DELETE ON journal
        FOR EACH ROW EXECUTE FUNCTION journal_append_only();
      CREATE TRIGGER journal_no_truncate BEFORE TRUNCATE ON journal
        FOR EACH STATEMENT EXECUTE FUNCTION journal_append_only();

      -- Daily roll-up of the charges per (account, day, model, key): what usage stats and key spend read. Added
      -- to in the charge's own transaction (postgres/ledger.ts), under the account's row lock.
      CREATE TABLE usage_daily (
        account_id         text NOT NULL,
        day                text COLLATE "C" NOT NULL,  -- UTC, YYYY-MM-DD: compared byte-wise, whatever the collation
        model              text NOT NULL,
        key_id             text NOT NULL,
        requests           bigint NOT NULL,
        prompt_tokens      bigint NOT NULL,
        completion_tokens  bigint NOT NULL,
        images             bigint NOT NULL,
        audio_ms           bigint NOT NULL,
        ${money('cost')},
        PRIMARY KEY (account_id, day, model, key_id)
      );
      CREATE INDEX usage_daily_by_key ON usage_daily (key_id, day);

      -- What each write to accounts, keys and funds changed, for the caches of other processes (postgres/changes.ts).
      -- Charges never write here. origin names the store handle that wrote the row (its own feed leaves it out).
      CREATE TABLE changes (
        seq         bigint PRIMARY KEY,
        kind        text NOT NULL CHECK (kind IN ('account', 'key', 'funds')),
        account_id  text NOT NULL,
        key_id      text,
        origin      text
      );
      CREATE SEQUENCE changes_seq;
      -- Seqs are handed out in commit order: the transaction-scoped advisory lock, taken before the seq and held
      -- until COMMIT, means no transaction can take a higher seq and commit while a lower one is still open. A
      -- reader that has seen seq N has therefore seen every committed seq below N (a rolled-back one leaves a
      -- harmless gap), and "WHERE seq > last" never skips a row. Writes here are rare (keys, funds, accounts).
      -- Each insert also trims the table to its newest ${CHANGES_KEPT} rows and wakes the listeners
      -- (NOTIFY is sent at COMMIT, and never for a transaction rolled back).
      CREATE FUNCTION changes_ordered() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_advisory_xact_lock(${LOCK_CLASS}, ${CHANGES_LOCK});
        NEW.seq := nextval('changes_seq');
        DELETE FROM changes WHERE seq <= NEW.seq - ${CHANGES_KEPT};
        PERFORM pg_notify('svc_changes', NEW.seq::text);
        RETURN NEW;
      END $$;
      CREATE TRIGGER changes_ordered BEFORE INSERT ON changes FOR EACH ROW EXECUTE FUNCTION changes_ordered();

      -- Async image jobs (src/store/jobs.ts). A job's charge is a journal row under the job's id, so "billed" is
      -- the journal's to say (jobCharged). owner: the replica that runs it (null: none named); another replica
      -- takes it over once that one is no longer live (claimUnfinished).
      CREATE TABLE jobs (
        id                 text PRIMARY KEY,
        account_id         text NOT NULL,
        key_id             text,
        surface            text NOT NULL,
        model              text NOT NULL,
        provider_address   text NOT NULL,
        params             text NOT NULL,
        body               bytea,
        body_path          text,
        status             text NOT NULL CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
        provider           text,
        result             text,
        trace              text,
        error              text,
        res_key            text NOT NULL DEFAULT '',
        owner              text,
        created_at         bigint NOT NULL,
        updated_at         bigint NOT NULL,
        ord                bigint GENERATED ALWAYS AS IDENTITY
      );
      CREATE INDEX jobs_unfinished ON jobs (created_at, ord) WHERE status IN ('pending', 'processing');
      CREATE INDEX jobs_ended ON jobs (updated_at) WHERE status IN ('completed', 'failed');
    `,
  },
  {
    version: 2,
    name: 'replicas: the registry, budget leases and what they lease',
    sql: CLUSTER_MIGRATION,
  },
  {
    version: 3,
    name: 'stored responses (POST /v1/responses)',
    sql: RESPONSES_MIGRATION,
  },
  {
    version: 4,
    name: 'budget leases: a batch of charges paid key by key',
    sql: LEASE_PAY_BY_KEY_MIGRATION,
  },
  {
    version: 5,
    name: 'budget leases: the key period function keeps its plan',
    sql: KEY_PERIOD_PLPGSQL_MIGRATION,
  },
  {
    version: 6,
    name: 'settlement books per chain provider',
    sql: SETTLEMENT_MIGRATION,
  },
  {
    version: 7,
    name: "a charge records the chain provider's price in neuron",
    // Beside the USD billed, what the answer owes a chain provider at its own prices (src/settlement/); NULL
    // for providers without chain prices and for deposits and credits. No default: adding it rewrites nothing.
    sql: `ALTER TABLE journal ADD COLUMN neuron NUMERIC(78,0) CHECK (neuron IS NULL OR (neuron >= 0 AND kind = 'charge'));`,
  },
  {
    version: 8,
    name: 'settlement books: the block the balance was read at, and the pending refund read with it',
    sql: SETTLEMENT_LAST_BLOCK_MIGRATION,
  },
  {
    version: 9,
    name: "a batch of charges in one statement; served kept per provider and replica",
    sql: CHARGE_BATCH_MIGRATION,
  },
  {
    version: 10,
    name: 'a batch of charges in fewer statements: no per-row foreign key check, one read of what is billed',
    sql: FEWER_STATEMENTS_MIGRATION,
  },
  {
    version: 11,
    name: 'a batch whose leases cover it pays them in the statement that appends it',
    sql: LEASED_BATCH_MIGRATION,
  },
  {
    version: 12,
    name: "the account's and the key's settings checked when they are written, not with every charge",
    sql: SETTINGS_CHECKED_WHEN_WRITTEN_MIGRATION,
  },
]
