/**
 * Migration 9: a batch of charges is one statement, `SELECT ... FROM svc_charge_batch(...)`, prepared once per
 * connection (a pg named statement) and run in autocommit: its implicit transaction is the batch's, committed
 * (flushed: synchronous_commit on) before the answer leaves the server. Before, the same work was BEGIN, the
 * account locks, the lease payment, the append and COMMIT: five statements (four without leases) the server
 * parsed, bound and answered one by one, each with its own Sync, in one write from the client. Now the server
 * runs one Bind/Execute per batch and the function's statements keep their plans for the session (PL/pgSQL).
 *
 * What a chain provider was served moves to `provider_served`, one row per provider and replica: a batch adds
 * to its own replica's row, so two replicas' batches for a busy provider no longer queue on one shared row
 * (provider_settlement.served, which every batch of every replica locked until its commit). Served is still
 * written in the charge's own transaction, so it is exact whatever crashes: provider_settlement.served keeps
 * what was served before this migration and what replicas gone were served (folded in by svc_fold_served when
 * a replica leaves or is reaped), and a provider's served is that plus the sum of its provider_served rows.
 *
 * Lock order, unchanged: the batch's accounts in id order, then (leased charges) keys and leases
 * (leases.ts), then the journal's unique index, usage_daily (rows of accounts held) and the replica's own
 * provider_served rows in provider order; svc_fold_served locks a provider_served row, then provider_settlement's.
 */
/**
 * The pieces svc_charge_batch is written from (migrations 9 and 11): its signature; the accounts' lock; the
 * batch as rows; the append (ON CONFLICT: a request billed already is skipped); what the appended charges add to
 * their chain providers' served; and the daily roll-up, then the answer. Migration 9's text is exactly what it
 * was when it was written out whole (a database migrated then ran that text).
 */
const BATCH_SIGNATURE = `svc_charge_batch(r TEXT, ids TEXT[],
  p_account TEXT[], p_amount NUMERIC[], p_request TEXT[], p_key TEXT[], p_at BIGINT[], p_model TEXT[],
  p_provider TEXT[], p_prompt BIGINT[], p_completion BIGINT[], p_images BIGINT[], p_audio BIGINT[], p_day TEXT[],
  p_neuron NUMERIC[],
  l_request TEXT[], l_account TEXT[], l_key TEXT[], l_period BIGINT[], l_cost NUMERIC[])
RETURNS TABLE (o_known TEXT[], o_seqs BIGINT[], o_requests TEXT[])`
const LOCK_ACCOUNTS = `  SELECT coalesce(array_agg(l.id), '{}') INTO o_known
    FROM (SELECT id FROM accounts WHERE id = ANY (ids) ORDER BY id FOR NO KEY UPDATE) l;`
const INPUT_ROWS = `  WITH input AS (
    SELECT * FROM unnest(p_account, p_amount, p_request, p_key, p_at, p_model, p_provider, p_prompt, p_completion,
      p_images, p_audio, p_day, p_neuron) WITH ORDINALITY
      AS c(account_id, amount, request_id, key_id, created_at, model, provider, prompt_tokens, completion_tokens,
        images, audio_ms, day, neuron, ord)
  ),`
const APPEND_CHARGES = ` appended AS (
    INSERT INTO journal (account_id, kind, amount, request_id, key_id, memo, created_at, model, provider,
      prompt_tokens, completion_tokens, images, audio_ms, neuron)
    SELECT account_id, 'charge', amount, request_id, key_id, '', created_at, model, provider,
      prompt_tokens, completion_tokens, images, audio_ms, neuron
    FROM input WHERE input.account_id = ANY (o_known)
    ORDER BY ord
    ON CONFLICT (request_id) WHERE kind = 'charge' DO NOTHING
    RETURNING seq, request_id, account_id, key_id, model, provider, neuron, amount, prompt_tokens, completion_tokens, images, audio_ms
  ),`
const SERVED = ` served AS (
    INSERT INTO provider_served AS p (provider, replica, served)
    SELECT provider, r, sum(neuron) FROM appended WHERE neuron > 0 GROUP BY provider ORDER BY provider
    ON CONFLICT (provider, replica) DO UPDATE SET served = p.served + EXCLUDED.served
  ),`
const DAILY_AND_ANSWER = ` daily AS (
    INSERT INTO usage_daily AS u (account_id, day, model, key_id, requests, prompt_tokens, completion_tokens,
      images, audio_ms, cost)
    SELECT a.account_id, i.day, a.model, a.key_id, count(*),
      LEAST(sum(a.prompt_tokens), 9007199254740991)::bigint, LEAST(sum(a.completion_tokens), 9007199254740991)::bigint,
      LEAST(sum(a.images), 9007199254740991)::bigint, LEAST(sum(a.audio_ms), 9007199254740991)::bigint, sum(a.amount)
    FROM appended a JOIN input i ON i.request_id = a.request_id
    GROUP BY a.account_id, i.day, a.model, a.key_id
    ON CONFLICT (account_id, day, model, key_id) DO UPDATE SET
      requests = LEAST(u.requests::numeric + EXCLUDED.requests, 9007199254740991)::bigint,
      prompt_tokens = LEAST(u.prompt_tokens::numeric + EXCLUDED.prompt_tokens, 9007199254740991)::bigint,
      completion_tokens = LEAST(u.completion_tokens::numeric + EXCLUDED.completion_tokens, 9007199254740991)::bigint,
      images = LEAST(u.images::numeric + EXCLUDED.images, 9007199254740991)::bigint,
      audio_ms = LEAST(u.audio_ms::numeric + EXCLUDED.audio_ms, 9007199254740991)::bigint,
      cost = u.cost + EXCLUDED.cost
  )
  SELECT coalesce(array_agg(seq ORDER BY seq), '{}'), coalesce(array_agg(request_id ORDER BY seq), '{}')
    INTO o_seqs, o_requests FROM appended;
  RETURN NEXT;`

export const CHARGE_BATCH_MIGRATION = `
CREATE TABLE provider_served (
  provider text NOT NULL,
  replica  text NOT NULL,
  served   NUMERIC(78,0) NOT NULL DEFAULT 0 CHECK (served >= 0),
  PRIMARY KEY (provider, replica)
);

-- Appends a batch of charges: locks its accounts (id order), pays its leased charges out of replica r's leases
-- (svc_lease_pay_all: raises 'svc: lease lost' naming a charge nothing can pay; the caller runs the batch
-- again without it), appends the charges of existing accounts whose request is not billed yet (in batch
-- order), and adds exactly the appended ones into accounts.spent, usage_daily and replica r's served rows.
-- Answers the accounts that exist and, for each appended charge, its seq and request.
CREATE FUNCTION ${BATCH_SIGNATURE}
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
${LOCK_ACCOUNTS}
  IF l_request IS NOT NULL THEN
    PERFORM svc_lease_pay_all(r, l_request, l_account, l_key, l_period, l_cost);
  END IF;
${INPUT_ROWS}${APPEND_CHARGES}${SERVED} spent AS (
    UPDATE accounts a SET spent = a.spent + s.amount
    FROM (SELECT account_id, sum(amount) AS amount FROM appended GROUP BY account_id) s
    WHERE a.id = s.account_id
  ),${DAILY_AND_ANSWER}
END $$;

-- Moves the served rows of replicas no longer registered (gone, or reaped) into provider_settlement.served,
-- each row's move one delete and one add in the same transaction: nothing counted twice or lost. The row of
-- a handle that is no replica ('') stays. Answers how many rows moved.
CREATE FUNCTION svc_fold_served() RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE f RECORD; n INTEGER := 0;
BEGIN
  FOR f IN DELETE FROM provider_served s
      WHERE s.replica <> '' AND NOT EXISTS (SELECT 1 FROM replicas WHERE id = s.replica)
      RETURNING s.provider, s.served LOOP
    INSERT INTO provider_settlement AS p (provider, served) VALUES (f.provider, f.served)
      ON CONFLICT (provider) DO UPDATE SET served = p.served + EXCLUDED.served;
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
`

/**
 * Migration 10: fewer statements per batch, measured on the store alone (one replica's leased charges, one key,
 * PostgreSQL 15 on this 2-core VM). A batch's cost in the backend is mostly per statement, not per row: each
 * statement the function runs builds and tears down its executor, and each one that writes a row parses and
 * compiles every CHECK constraint of that table again (ExecConstraints: PostgreSQL keeps no compiled
 * constraint across statements). By `perf` of the backends a batch of one leased charge cost ~470 us of CPU,
 * most of it that, and ~14 us more for each further charge.
 * - The journal's foreign key to accounts goes: it ran a trigger and a lookup per appended row, and it guards
 *   nothing these writers do not: a charge is appended only for an account svc_charge_batch found and locked,
 *   a deposit or credit only in the statement that updated its account, and no account is ever deleted.
 * - Both functions keep one generic plan per statement (plan_cache_mode): their `= ANY (array)` reads were
 *   planned afresh on every call, the custom plan looking cheaper (pg_stat_statements: 55 us of planning in a
 *   batch of one), with sequential scans off so that no cached plan scans a table an index reaches: a
 *   generic plan made while the journal was small scanned all of it for `request_id = ANY (rid)`.
 * - svc_lease_pay_all finds the requests billed already with one indexed read of the batch instead of one probe
 *   per charge, reads the key's period with its lock (svc_key_period
 *   runs only when the period moved: a no-op UPDATE was two statements per key per batch), and takes the
 *   lease's share with one UPDATE where a lease is left over (the usual case) instead of a read and a write.
 * Same locks in the same order, same results.
 */
export const FEWER_STATEMENTS_MIGRATION = `
ALTER TABLE journal DROP CONSTRAINT journal_account_id_fkey;
ALTER FUNCTION svc_charge_batch SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION svc_charge_batch SET enable_seqscan = off;

CREATE OR REPLACE FUNCTION svc_lease_pay_all(r TEXT, rid TEXT[], a TEXT[], k TEXT[], ps BIGINT[], cost NUMERIC[]) RETURNS INTEGER
LANGUAGE plpgsql SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  g RECORD;
  have NUMERIC;
  kps BIGINT;
  whole TEXT[] := '{}';
  taken JSONB := '{}';
  how TEXT;
  n INTEGER := 0;
  billed TEXT[];
BEGIN
  SELECT coalesce(array_agg(request_id), '{}') INTO billed FROM journal WHERE kind = 'charge' AND request_id = ANY (rid);
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
    SELECT period_start INTO kps FROM api_keys WHERE id = g.key_id FOR NO KEY UPDATE;
    IF FOUND AND kps <> g.period THEN PERFORM svc_key_period(g.key_id, g.period); END IF;
    UPDATE budget_leases SET amount = amount - g.total WHERE replica_id = r AND key_id = g.key_id AND amount > g.total;
    IF NOT FOUND THEN
      SELECT amount INTO have FROM budget_leases WHERE replica_id = r AND key_id = g.key_id FOR UPDATE;
      CONTINUE WHEN NOT FOUND OR have <> g.total;
      DELETE FROM budget_leases WHERE replica_id = r AND key_id = g.key_id;
    END IF;
    UPDATE accounts SET leased = leased - g.total WHERE id = g.account_id;
    UPDATE api_keys SET leased = leased - g.total, period_used = period_used + g.total WHERE id = g.key_id;
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

/** The batch's one statement (its parameters in svc_charge_batch's order). */
export const CHARGE_BATCH_SQL =
  'SELECT o_known, o_seqs, o_requests FROM svc_charge_batch($1, $2::text[], $3::text[], $4::numeric[], $5::text[], $6::text[], ' +
  '$7::bigint[], $8::text[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], $15::numeric[], ' +
  '$16::text[], $17::text[], $18::text[], $19::bigint[], $20::numeric[])'

/**
 * Migration 11: a batch whose leased charges this replica's leases cover (the usual case) pays them in the
 * statement that appends them. Before, svc_charge_batch called svc_lease_pay_all, which read the batch's key
 * groups and, per key, locked the account again, locked the key, updated the lease, the account's `leased`
 * and the key, and kept a JSON map of what each account took; then the append's statement updated the account
 * a second time for `spent`. By pg_stat_statements a batch of one leased charge ran ~12 statements and ~300 us
 * of the backend's time, mostly per statement rather than per row.
 * Now one statement reads the key groups, locks their keys and leases (key order, after the accounts, as
 * before) and counts the groups a lease covers with room to spare, on the latest row versions; when every group
 * is covered, the append's statement also takes each group's total off its lease and the key's `leased` into
 * its period spend, and updates each account once (spent up, leased down). Otherwise (a lease exactly used up
 * or gone, a key's period that moved, a key on two accounts or periods) the batch goes the way it went before:
 * svc_lease_pay_all, then the same append with nothing more to pay. Same locks in the same order, same results.
 */
export const LEASED_BATCH_MIGRATION = `
CREATE OR REPLACE FUNCTION ${BATCH_SIGNATURE}
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
  billed TEXT[] := '{}';
  groups BIGINT := 0;
  covered BIGINT := 0;
  fast BOOLEAN := true;
BEGIN
${LOCK_ACCOUNTS}
  IF l_request IS NOT NULL THEN
    SELECT coalesce(array_agg(request_id), '{}') INTO billed FROM journal WHERE kind = 'charge' AND request_id = ANY (l_request);
    WITH g AS (
      SELECT c.key_id, min(c.account_id) AS account_id, count(DISTINCT c.account_id) AS accounts, min(c.period) AS period,
        count(DISTINCT c.period) AS periods, sum(c.amount) AS total
      FROM unnest(l_request, l_account, l_key, l_period, l_cost) AS c(request_id, account_id, key_id, period, amount)
      WHERE c.request_id <> ALL (billed)
      GROUP BY c.key_id
    )
    SELECT (SELECT count(*) FROM g), count(*) INTO groups, covered FROM (
      SELECT 1 FROM g
        JOIN api_keys k ON k.id = g.key_id
        JOIN budget_leases bl ON bl.replica_id = r AND bl.key_id = g.key_id
      WHERE g.accounts = 1 AND g.periods = 1 AND g.account_id = ANY (o_known) AND bl.account_id = g.account_id
        AND k.period_start = g.period AND bl.amount > g.total
      ORDER BY g.key_id
      FOR NO KEY UPDATE OF k FOR UPDATE OF bl
    ) x;
    IF covered <> groups THEN
      fast := false;
      PERFORM svc_lease_pay_all(r, l_request, l_account, l_key, l_period, l_cost);
    END IF;
  END IF;
${INPUT_ROWS} paid AS (
    SELECT c.key_id, min(c.account_id) AS account_id, sum(c.amount) AS total
    FROM unnest(l_request, l_account, l_key, l_cost) AS c(request_id, account_id, key_id, amount)
    WHERE fast AND c.request_id <> ALL (billed)
    GROUP BY c.key_id
  ),${APPEND_CHARGES} leases AS (
    UPDATE budget_leases bl SET amount = bl.amount - p.total FROM paid p WHERE bl.replica_id = r AND bl.key_id = p.key_id
  ), keys AS (
    UPDATE api_keys k SET leased = k.leased - p.total, period_used = k.period_used + p.total FROM paid p WHERE k.id = p.key_id
  ),${SERVED} spent AS (
    UPDATE accounts a SET spent = a.spent + s.spent, leased = a.leased - s.leased
    FROM (SELECT account_id, sum(spent) AS spent, sum(leased) AS leased FROM (
        SELECT account_id, amount AS spent, 0 AS leased FROM appended
        UNION ALL SELECT account_id, 0, total FROM paid) u
      GROUP BY account_id) s
    WHERE a.id = s.account_id
  ),${DAILY_AND_ANSWER}
END $$;
`
