/**
 * The SQLite schema, as numbered migrations applied in order at start (src/store/sqlite/migrate.ts). A
 * migration is never edited once released: change the schema by appending one.
 *
 * Money columns are TEXT holding an integer amount of atto-USD: SQLite integers are 64-bit and would overflow
 * past ~9.2 USD. The database never adds money up (no SUM() on these columns); the store does it with BigInt.
 */

export interface Migration {
  readonly version: number
  readonly name: string
  readonly sql: string
}

/**
 * Rows of `store_changes` kept (migration 2's window trigger: changing it takes a migration that replaces the
 * trigger). A reader whose watermark is further behind may have missed some and drops everything instead
 * (sqlite/changes.ts); at one poll a second, only a burst of more writes than this between two polls gets there.
 */
export const CHANGES_KEPT = 10_000

/** A CHECK that a TEXT money column holds a non-negative integer written in digits only. */
const money = (column: string): string => `CHECK (length(${column}) > 0 AND ${column} NOT GLOB '*[^0-9]*')`

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'accounts, keys and ledger',
    sql: `
      CREATE TABLE accounts (
        id          TEXT PRIMARY KEY CHECK (length(id) = 42 AND substr(id, 1, 2) = '0x' AND substr(id, 3) NOT GLOB '*[^0-9a-f]*'),
        rate_limit  INTEGER CHECK (rate_limit IS NULL OR rate_limit > 0),
        -- Running totals of the journal, updated in the same transaction as each entry.
        deposited   TEXT NOT NULL DEFAULT '0' ${money('deposited')},
        credited    TEXT NOT NULL DEFAULT '0' ${money('credited')},
        spent       TEXT NOT NULL DEFAULT '0' ${money('spent')},
        created_at  INTEGER NOT NULL
      ) STRICT;

      CREATE TABLE api_keys (
        id                TEXT PRIMARY KEY,
        account_id        TEXT NOT NULL REFERENCES accounts(id),
        hash              TEXT NOT NULL UNIQUE,
        preview           TEXT NOT NULL,
        name              TEXT NOT NULL,
        trust_mode        TEXT CHECK (trust_mode IN ('standard', 'verified', 'private')),
        revoked_at        INTEGER,
        credit_limit      TEXT CHECK (credit_limit IS NULL OR (length(credit_limit) > 0 AND credit_limit NOT GLOB '*[^0-9]*')),
        reset_period      TEXT NOT NULL DEFAULT 'never' CHECK (reset_period IN ('never', 'daily', 'weekly', 'monthly')),
        expires_at        INTEGER,
        allowed_models    TEXT,  -- JSON array of model ids; NULL = unrestricted
        allowed_providers TEXT,  -- JSON array of lower-case addresses; NULL = unrestricted
        created_at        INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX api_keys_by_account ON api_keys (account_id, created_at);

      CREATE TABLE mgmt_keys (
        id              TEXT PRIMARY KEY,
        account_id      TEXT NOT NULL REFERENCES accounts(id),
        hash            TEXT NOT NULL UNIQUE,
        preview         TEXT NOT NULL,
        name            TEXT NOT NULL,
        scopes          TEXT NOT NULL,  -- space-separated
        revoked_at      INTEGER,
        created_at      INTEGER NOT NULL,
        last_used_at    INTEGER,
        last_source_ip  TEXT
      ) STRICT;
      CREATE INDEX mgmt_keys_by_account ON mgmt_keys (account_id, created_at);

      -- The ledger: append-only. A charge names the request it bills, and a request is billed at most once.
      CREATE TABLE journal (
        seq         INTEGER PRIMARY KEY AUTOINCREMENT,
        account_id  TEXT NOT NULL REFERENCES accounts(id),
        kind        TEXT NOT NULL CHECK (kind IN ('deposit', 'credit', 'charge')),
        amount      TEXT NOT NULL ${money('amount')},
        request_id  TEXT CHECK ((kind = 'charge') = (request_id IS NOT NULL)),
        key_id      TEXT,
        memo        TEXT NOT NULL DEFAULT '',
        created_at  INTEGER NOT NULL
      ) STRICT;
      CREATE UNIQUE INDEX journal_charge_per_request ON journal (request_id) WHERE kind = 'charge';
      CREATE INDEX journal_by_account ON journal (account_id, seq);
      CREATE TRIGGER journal_no_update BEFORE UPDATE ON journal BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
      CREATE TRIGGER journal_no_delete BEFORE DELETE ON journal BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;

      -- One row per billed request.
      CREATE TABLE usage_records (
        request_id         TEXT PRIMARY KEY,
        account_id         TEXT NOT NULL REFERENCES accounts(id),
        key_id             TEXT NOT NULL,
        model              TEXT NOT NULL,
        provider           TEXT NOT NULL,
        day                TEXT NOT NULL,  -- UTC, YYYY-MM-DD
        created_at         INTEGER NOT NULL,
        prompt_tokens      INTEGER NOT NULL,
        completion_tokens  INTEGER NOT NULL,
        images             INTEGER NOT NULL,
        audio_ms           INTEGER NOT NULL,
        cost               TEXT NOT NULL ${money('cost')}
      ) STRICT;
      CREATE INDEX usage_records_by_account ON usage_records (account_id, day);

      -- Daily roll-up of usage_records per (account, day, model, key): what usage stats and key spend read.
      CREATE TABLE usage_daily (
        account_id         TEXT NOT NULL,
        day                TEXT NOT NULL,
        model              TEXT NOT NULL,
        key_id             TEXT NOT NULL,
        requests           INTEGER NOT NULL,
        prompt_tokens      INTEGER NOT NULL,
        completion_tokens  INTEGER NOT NULL,
        images             INTEGER NOT NULL,
        audio_ms           INTEGER NOT NULL,
        cost               TEXT NOT NULL ${money('cost')},
        PRIMARY KEY (account_id, day, model, key_id)
      ) STRICT, WITHOUT ROWID;
      CREATE INDEX usage_daily_by_key ON usage_daily (key_id, day);
    `,
  },
  {
    version: 2,
    name: 'store_changes: what each write changed, for the caches of other processes',
    // Written by triggers, so every writer (the router, the operator CLI, a sqlite3 shell) records its changes.
    // None of them fires on the charge path: a charge inserts into journal, usage_records and usage_daily
    // (no triggers on insert) and updates only accounts.spent, which no trigger names.
    sql: `
      CREATE TABLE store_changes (
        seq         INTEGER PRIMARY KEY AUTOINCREMENT,
        kind        TEXT NOT NULL CHECK (kind IN ('account', 'key', 'funds')),
        account_id  TEXT NOT NULL,
        key_id      TEXT
      ) STRICT;
      -- Bounded: only the newest 10000 rows (CHANGES_KEPT) are kept.
      CREATE TRIGGER store_changes_window AFTER INSERT ON store_changes BEGIN
        DELETE FROM store_changes WHERE seq <= NEW.seq - 10000;
      END;

      CREATE TRIGGER accounts_inserted AFTER INSERT ON accounts BEGIN
        INSERT INTO store_changes (kind, account_id) VALUES ('account', NEW.id);
      END;
      CREATE TRIGGER accounts_rate_limit AFTER UPDATE OF rate_limit ON accounts WHEN NEW.rate_limit IS NOT OLD.rate_limit BEGIN
        INSERT INTO store_changes (kind, account_id) VALUES ('account', NEW.id);
      END;
      CREATE TRIGGER accounts_deleted AFTER DELETE ON accounts BEGIN
        INSERT INTO store_changes (kind, account_id) VALUES ('account', OLD.id);
      END;
      -- Deposits and credits move these totals in the same transaction as their journal entry.
      CREATE TRIGGER accounts_funds AFTER UPDATE OF deposited, credited ON accounts
        WHEN NEW.deposited IS NOT OLD.deposited OR NEW.credited IS NOT OLD.credited BEGIN
        INSERT INTO store_changes (kind, account_id) VALUES ('funds', NEW.id);
      END;

      CREATE TRIGGER api_keys_inserted AFTER INSERT ON api_keys BEGIN
        INSERT INTO store_changes (kind, account_id, key_id) VALUES ('key', NEW.account_id, NEW.id);
      END;
      CREATE TRIGGER api_keys_updated AFTER UPDATE ON api_keys BEGIN
        INSERT INTO store_changes (kind, account_id, key_id) VALUES ('key', NEW.account_id, NEW.id);
      END;
      CREATE TRIGGER api_keys_deleted AFTER DELETE ON api_keys BEGIN
        INSERT INTO store_changes (kind, account_id, key_id) VALUES ('key', OLD.account_id, OLD.id);
      END;

      CREATE TRIGGER mgmt_keys_inserted AFTER INSERT ON mgmt_keys BEGIN
        INSERT INTO store_changes (kind, account_id, key_id) VALUES ('key', NEW.account_id, NEW.id);
      END;
      -- Not last_used_at / last_source_ip: the audit write changes nothing a cache holds.
      CREATE TRIGGER mgmt_keys_updated AFTER UPDATE OF account_id, hash, preview, name, scopes, revoked_at ON mgmt_keys BEGIN
        INSERT INTO store_changes (kind, account_id, key_id) VALUES ('key', NEW.account_id, NEW.id);
      END;
      CREATE TRIGGER mgmt_keys_deleted AFTER DELETE ON mgmt_keys BEGIN
        INSERT INTO store_changes (kind, account_id, key_id) VALUES ('key', OLD.account_id, OLD.id);
      END;
    `,
  },
  {
    version: 3,
    name: 'lean charges: one journal row per charge, totals folded in behind it',
    // Before: a charge wrote a journal row (AUTOINCREMENT: sqlite_sequence too; two indexes), a usage_records
    // row (its text key and an index), a usage_daily row and accounts.spent: about ten pages per commit. Now it
    // appends one journal row carrying its usage, plus one entry of the request_id uniqueness index (request
    // ids of one process increase, so both land on the last page). accounts.spent and usage_daily are folded in
    // from the journal behind a watermark (sqlite/ledger.ts fold()); every reader folds first, so what it reads
    // is exact, and a crash between a charge and its fold loses nothing: the next fold picks it up.
    sql: `
      CREATE TABLE journal_lean (
        seq                INTEGER PRIMARY KEY,  -- rows are never deleted, so max(seq) + 1 never reuses one
        account_id         TEXT NOT NULL REFERENCES accounts(id),
        kind               TEXT NOT NULL CHECK (kind IN ('deposit', 'credit', 'charge')),
        amount             TEXT NOT NULL ${money('amount')},
        request_id         TEXT CHECK ((kind = 'charge') = (request_id IS NOT NULL)),
        key_id             TEXT,
        memo               TEXT NOT NULL DEFAULT '',
        created_at         INTEGER NOT NULL,
        -- Charges only (NULL on deposits and credits): what usage_records held.
        model              TEXT CHECK ((kind = 'charge') = (model IS NOT NULL)),
        provider           TEXT,
        prompt_tokens      INTEGER,
        completion_tokens  INTEGER,
        images             INTEGER,
        audio_ms           INTEGER
      ) STRICT;
      INSERT INTO journal_lean
        SELECT j.seq, j.account_id, j.kind, j.amount, j.request_id, j.key_id, j.memo, j.created_at,
          CASE WHEN j.kind = 'charge' THEN coalesce(u.model, '') END, u.provider,
          u.prompt_tokens, u.completion_tokens, u.images, u.audio_ms
        FROM journal j LEFT JOIN usage_records u ON j.kind = 'charge' AND u.request_id = j.request_id;
      DROP TABLE journal;
      DROP TABLE usage_records;
      ALTER TABLE journal_lean RENAME TO journal;
      CREATE UNIQUE INDEX journal_charge_per_request ON journal (request_id) WHERE kind = 'charge';
      -- Deposits and credits by account; an account's charges are an audit read that scans (no request path).
      CREATE INDEX journal_funds_by_account ON journal (account_id, seq) WHERE kind <> 'charge';
      CREATE TRIGGER journal_no_update BEFORE UPDATE ON journal BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;
      CREATE TRIGGER journal_no_delete BEFORE DELETE ON journal BEGIN SELECT RAISE(ABORT, 'journal is append-only'); END;

      -- Charges with seq <= folded_seq are in accounts.spent and usage_daily; the ones after are not yet.
      CREATE TABLE ledger_fold (
        id          INTEGER PRIMARY KEY CHECK (id = 1),
        folded_seq  INTEGER NOT NULL
      ) STRICT;
      INSERT INTO ledger_fold (id, folded_seq) VALUES (1, coalesce((SELECT max(seq) FROM journal), 0));
    `,
  },
  {
    version: 4,
    name: 'async image jobs',
    // One row per job (src/store/jobs.ts). A job's charge is a journal row under the job's id, so "billed" is
    // the journal's to say (jobCharged), never a column here that a crash could leave out of step with it.
    sql: `
      CREATE TABLE jobs (
        id                 TEXT PRIMARY KEY,
        account_id         TEXT NOT NULL,
        key_id             TEXT,
        surface            TEXT NOT NULL,
        model              TEXT NOT NULL,
        provider_address   TEXT NOT NULL,
        params             TEXT NOT NULL,
        body               BLOB,
        body_path          TEXT,
        status             TEXT NOT NULL CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
        provider           TEXT,
        result             TEXT,
        trace              TEXT,
        error              TEXT,
        res_key            TEXT NOT NULL DEFAULT '',
        created_at         INTEGER NOT NULL,
        updated_at         INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX jobs_unfinished ON jobs (created_at) WHERE status IN ('pending', 'processing');
      CREATE INDEX jobs_ended ON jobs (updated_at) WHERE status IN ('completed', 'failed');
    `,
  },
  {
    version: 5,
    name: 'stored responses',
    // The Responses surface's conversation state (src/store/responses.ts). Reads always name the account and
    // the time, so the (id) and (account_id, id) keys answer them; expires_at drives the sweep.
    sql: `
      CREATE TABLE responses (
        id          TEXT PRIMARY KEY,
        account_id  TEXT NOT NULL,
        model       TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL,
        input       TEXT NOT NULL,
        output      TEXT NOT NULL,
        response    TEXT NOT NULL
      ) STRICT;
      CREATE INDEX responses_expiry ON responses (expires_at);

      -- Output items by id, for item_reference inputs; deleted with their response.
      CREATE TABLE response_items (
        account_id   TEXT NOT NULL,
        id           TEXT NOT NULL,
        response_id  TEXT NOT NULL,
        item         TEXT NOT NULL,
        PRIMARY KEY (account_id, id)
      ) STRICT;
      CREATE INDEX response_items_by_response ON response_items (response_id);
    `,
  },
  {
    version: 6,
    name: 'ledger quarantine: journal rows the fold cannot add up',
    // A charge the fold cannot add into the totals as it stands (written behind the router's back, or by a
    // version that stored a provider's counts unbounded) is listed here and stepped over, so one row never
    // stops the fold for every account (issue 43). part 'row': nothing of it is in the totals; part 'counts':
    // its amount is in accounts.spent (the money was billed) and its usage counts were left out of usage_daily.
    sql: `
      CREATE TABLE ledger_quarantine (
        seq     INTEGER PRIMARY KEY,  -- the journal row's
        part    TEXT NOT NULL CHECK (part IN ('row', 'counts')),
        reason  TEXT NOT NULL,
        at      INTEGER NOT NULL
      ) STRICT;
    `,
  },
  {
    version: 7,
    name: 'settlement books per chain provider',
    // What the router served each provider and what it settled, in neuron (src/store/settlement.ts).
    sql: `
      CREATE TABLE provider_settlement (
        provider      TEXT PRIMARY KEY,
        served        TEXT NOT NULL DEFAULT '0' ${money('served')},
        settled       TEXT NOT NULL DEFAULT '0' ${money('settled')},
        last_balance  TEXT,
        flagged       INTEGER NOT NULL DEFAULT 0
      ) STRICT;
    `,
  },
  {
    version: 8,
    name: 'a charge records the chain provider\'s price in neuron',
    // Beside the USD billed, what the answer owes a chain provider at its own prices (src/settlement/): exact
    // decimal text, NULL for providers without chain prices and for deposits and credits.
    sql: `
      ALTER TABLE journal ADD COLUMN neuron TEXT CHECK (neuron IS NULL OR (kind = 'charge' AND length(neuron) > 0 AND neuron NOT GLOB '*[^0-9]*'));
    `,
  },
  {
    version: 9,
    name: 'settlement books: the block the balance was read at, and the pending refund read with it',
    // Written with settled and last_balance (src/store/settlement.ts): after a restart the settlement events are
    // read on from this block instead of the balance's fall alone counting.
    sql: `
      ALTER TABLE provider_settlement ADD COLUMN last_block TEXT CHECK (last_block IS NULL OR (length(last_block) > 0 AND last_block NOT GLOB '*[^0-9]*'));
      ALTER TABLE provider_settlement ADD COLUMN last_pending_refund TEXT
        CHECK (last_pending_refund IS NULL OR (length(last_pending_refund) > 0 AND last_pending_refund NOT GLOB '*[^0-9]*'));
    `,
  },
]
