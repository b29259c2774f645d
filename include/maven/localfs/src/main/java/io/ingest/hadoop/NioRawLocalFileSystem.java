package io.ingest.hadoop;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FSLinkResolver;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's {@link RawLocalFileSystem} with its two process-starting calls done in the JVM.
 *
 * <p>Without libhadoop (pyspark ships none), Hadoop 3.5's {@code setPermission} starts a
 * {@code chmod} process per call and {@code getFileLinkStatus} a {@code readlink} process;
 * Spark's checkpoint files (offsets, commits, state), Delta's commits and Parquet's files call
 * them several times per micro-batch. A Spark driver spent 4.6 ms of wall time per
 * {@code chmod} and 3.5 ms per {@code readlink} on a 2-core machine. Here:
 *
 * <ul>
 *   <li>{@link #setPermission} sets the same nine permission bits with
 *       {@link Files#setPosixFilePermissions}; a sticky bit (which NIO cannot set), or a file
 *       system without POSIX permissions, still goes to Hadoop's own code.
 *   <li>{@link #getFileLinkStatus} and {@link #getLinkTarget} answer what Hadoop's
 *       {@code deprecatedGetFileLinkStatusInternal} answers, with the link read by
 *       {@link Files#readSymbolicLink} (Hadoop passes {@code readlink} the path's
 *       {@code file:/...} text, which always fails, so Hadoop reports every symlink as its
 *       target).
 * </ul>
 *
 * <p>Everything else is Hadoop's, but for a test seam in {@link #rename}.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {

  /**
   * Hadoop configuration key (milliseconds, default 0; tests only): pause before each
   * {@link #rename}, after Hadoop's check that the target is absent ({@code
   * FileContext.rename(src, dst, Rename.NONE)} and {@code FileSystem.rename} check first), so
   * a test can widen that window as a GC pause would and show the commit Delta's {@code
   * HDFSLogStore} then loses (tests/integration/test_delta_log_store.py).
   */
  public static final String RENAME_PAUSE_KEY = "io.ingest.test.renamePauseMs";

  /** Hadoop's rename, after {@link #RENAME_PAUSE_KEY} milliseconds when that is set. */
  @Override
  public boolean rename(Path src, Path dst) throws IOException {
    long millis = getConf() == null ? 0 : getConf().getLong(RENAME_PAUSE_KEY, 0);
    if (millis > 0) {
      try {
        Thread.sleep(millis);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new InterruptedIOException("interrupted in the rename pause");
      }
    }
    return super.rename(src, dst);
  }

  /** Sets {@code permission}'s nine bits on {@code p}, as {@code chmod} would. */
  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (permission.getStickyBit()) {
      super.setPermission(p, permission);
      return;
    }
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission));
    } catch (NoSuchFileException e) {
      throw new FileNotFoundException("File " + p + " does not exist");
    } catch (UnsupportedOperationException e) { // a file system without POSIX permissions
      super.setPermission(p, permission);
    }
  }

  /** The POSIX permission set of {@code permission}'s user, group and other actions. */
  static Set<PosixFilePermission> posix(FsPermission permission) {
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    add(bits, permission.getUserAction(), PosixFilePermission.OWNER_READ,
        PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
    add(bits, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
    add(bits, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
        PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
    return bits;
  }

  private static void add(Set<PosixFilePermission> bits, FsAction action,
      PosixFilePermission read, PosixFilePermission write, PosixFilePermission execute) {
    if (action.implies(FsAction.READ)) {
      bits.add(read);
    }
    if (action.implies(FsAction.WRITE)) {
      bits.add(write);
    }
    if (action.implies(FsAction.EXECUTE)) {
      bits.add(execute);
    }
  }

  /**
   * The status of {@code f} itself: a symlink's has {@link FileStatus#isSymlink()} true and
   * its qualified target; a file's or a folder's is {@link #getFileStatus}'s.
   *
   * @throws FileNotFoundException nothing (not even a dangling link) is at {@code f}
   */
  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    FileStatus status = linkStatus(f);
    if (status.isSymlink()) {
      status.setSymlink(
          FSLinkResolver.qualifySymlinkTarget(getUri(), status.getPath(), status.getSymlink()));
    }
    return status;
  }

  /** The target of the symlink {@code f}, as written in the link (not qualified). */
  @Override
  public Path getLinkTarget(Path f) throws IOException {
    return linkStatus(f).getSymlink();
  }

  /** Hadoop 3.5's {@code deprecatedGetFileLinkStatusInternal}, the link read by NIO. */
  private FileStatus linkStatus(Path f) throws IOException {
    java.nio.file.Path file = pathToFile(f).toPath();
    String target = Files.isSymbolicLink(file) ? Files.readSymbolicLink(file).toString() : "";
    try {
      FileStatus fs = getFileStatus(f);
      if (target.isEmpty()) {
        return fs;
      }
      return new FileStatus(fs.getLen(), false, fs.getReplication(), fs.getBlockSize(),
          fs.getModificationTime(), fs.getAccessTime(), fs.getPermission(), fs.getOwner(),
          fs.getGroup(), new Path(target), f);
    } catch (FileNotFoundException e) {
      if (!target.isEmpty()) { // a dangling link
        return new FileStatus(0, false, 0, 0, 0, 0, FsPermission.getDefault(), "", "",
            new Path(target), f);
      }
      throw e;
    }
  }
}
