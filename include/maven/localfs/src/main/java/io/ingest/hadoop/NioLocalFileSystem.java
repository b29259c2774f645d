package io.ingest.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed {@link LocalFileSystem} (the {@code FileSystem} API's {@code file:}
 * scheme) over {@link NioRawLocalFileSystem}. Set as {@code fs.file.impl}.
 */
public class NioLocalFileSystem extends LocalFileSystem {
  /** The checksummed local file system over a new {@link NioRawLocalFileSystem}. */
  public NioLocalFileSystem() {
    super(new NioRawLocalFileSystem());
  }
}
