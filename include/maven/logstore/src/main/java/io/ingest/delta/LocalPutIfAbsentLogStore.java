package io.ingest.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * A Delta {@code LogStore} for {@code file:} paths whose commit is an atomic put-if-absent.
 *
 * <p>Delta's mutual exclusion between writers rests on the log store refusing to write
 * {@code _delta_log/<version>.json} when that file exists (Delta's "LogStore" contract:
 * {@code write(path, actions, overwrite=false)} must throw {@link FileAlreadyExistsException}
 * atomically). Delta's default for {@code file:}, {@code HDFSLogStore}, goes through
 * {@code FileContext.rename(temp, target, Rename.NONE)}, which on a local file system checks
 * that the target is absent and then calls {@code rename(2)}, which replaces an existing file:
 * a writer paused between the two (a GC pause, a preemption on 2 cores) overwrites another
 * writer's commit (delta-rs's, or another Spark driver's) with no error anywhere; that commit's
 * rows are gone and its files orphaned (issue 50; reproduced by
 * tests/integration/test_delta_log_store.py).
 *
 * <p>Here the commit is written to a temporary file beside the target, then hard-linked to the
 * target: {@code link(2)} fails with {@code EEXIST} when the target exists, atomically, which is
 * what delta-rs does on a local file system. The temporary file is removed either way. An
 * overwrite (Delta's own {@code <version>.crc} and checkpoint files, never a commit) is an
 * atomic rename.
 *
 * <p>{@value #PAUSE_KEY} (milliseconds, default 0; tests only) pauses between writing the
 * temporary file and the atomic step, where {@code HDFSLogStore} has its window, so a test can
 * widen the window as a GC pause would.
 */
public class LocalPutIfAbsentLogStore extends HadoopFileSystemLogStore {

  /** Hadoop configuration key: pause (ms) before a commit's atomic step; tests only. */
  public static final String PAUSE_KEY = "io.ingest.test.commitPauseMs";

  /** Called by Delta's log store provider with the session's Hadoop configuration. */
  public LocalPutIfAbsentLogStore(Configuration initHadoopConf) {
    super(initHadoopConf);
  }

  /**
   * Write {@code actions}, one per line, to {@code path}.
   *
   * @throws FileAlreadyExistsException {@code overwrite} is false and {@code path} exists
   *     (another writer committed that version first); Delta then retries at a later version
   * @throws IOException the file cannot be written
   */
  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite,
      Configuration hadoopConf) throws IOException {
    java.nio.file.Path target = Paths.get(path.toUri());
    Files.createDirectories(target.getParent());
    java.nio.file.Path temp = target.resolveSibling(
        "." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
    try {
      try (Writer writer = Files.newBufferedWriter(
          temp, StandardCharsets.UTF_8, StandardOpenOption.CREATE_NEW)) {
        while (actions.hasNext()) {
          writer.write(actions.next());
          writer.write('\n');
        }
      }
      pause(hadoopConf);
      if (overwrite) {
        Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE,
            StandardCopyOption.REPLACE_EXISTING);
      } else {
        try {
          Files.createLink(target, temp);
        } catch (FileAlreadyExistsException e) {
          throw new FileAlreadyExistsException(path.toString());
        }
      }
    } finally {
      Files.deleteIfExists(temp);
    }
  }

  /** A reader sees a commit whole or not at all (link and rename are atomic). */
  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;
  }

  private static void pause(Configuration hadoopConf) throws InterruptedIOException {
    long millis = hadoopConf.getLong(PAUSE_KEY, 0);
    if (millis <= 0) {
      return;
    }
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted in the commit pause");
    }
  }
}
