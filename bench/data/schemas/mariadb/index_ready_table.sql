-- index variant 'ready_table': what replaces a partial index on MariaDB, second choice. A small
-- table of the ready (pending) rows only, clustered in claim order, kept by triggers on jobs, as
-- some queue libraries keep a ready list beside their job table. The claim locks its rows here
-- (SKIP LOCKED / NOWAIT apply to them), then updates jobs; history never enters this table.
CREATE TABLE {schema}.jobs_ready (
    priority SMALLINT    NOT NULL,
    run_at   DATETIME(6) NOT NULL,
    id       BIGINT      NOT NULL,
    PRIMARY KEY (priority, run_at, id)
) ENGINE = InnoDB;
INSERT INTO {schema}.jobs_ready (priority, run_at, id)
    SELECT priority, run_at, id FROM {schema}.jobs WHERE status = 'pending';
CREATE TRIGGER {schema}.jobs_ready_insert AFTER INSERT ON {schema}.jobs FOR EACH ROW
    INSERT INTO {schema}.jobs_ready (priority, run_at, id)
    SELECT NEW.priority, NEW.run_at, NEW.id FROM DUAL WHERE NEW.status = 'pending';
CREATE TRIGGER {schema}.jobs_ready_update AFTER UPDATE ON {schema}.jobs FOR EACH ROW
BEGIN
    IF OLD.status = 'pending' AND (NEW.status <> 'pending' OR NEW.run_at <> OLD.run_at
                                   OR NEW.priority <> OLD.priority) THEN
        DELETE FROM {schema}.jobs_ready WHERE priority = OLD.priority AND run_at = OLD.run_at AND id = OLD.id;
    END IF;
    IF NEW.status = 'pending' AND (OLD.status <> 'pending' OR NEW.run_at <> OLD.run_at
                                   OR NEW.priority <> OLD.priority) THEN
        INSERT INTO {schema}.jobs_ready (priority, run_at, id) VALUES (NEW.priority, NEW.run_at, NEW.id);
    END IF;
END;
CREATE TRIGGER {schema}.jobs_ready_delete AFTER DELETE ON {schema}.jobs FOR EACH ROW
    DELETE FROM {schema}.jobs_ready WHERE priority = OLD.priority AND run_at = OLD.run_at AND id = OLD.id;
