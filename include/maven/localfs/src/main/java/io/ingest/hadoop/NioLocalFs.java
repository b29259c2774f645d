package io.ingest.hadoop;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * Hadoop's checksummed {@code LocalFs} (the {@code FileContext} API's {@code file:} scheme,
 * which Spark's checkpoint file manager uses) over {@link NioRawLocalFileSystem}. Set as
 * {@code fs.AbstractFileSystem.file.impl}. Hadoop's own {@code LocalFs} and {@code RawLocalFs}
 * cannot be given another raw file system (package-private constructors), so this repeats
 * {@code RawLocalFs}'s four overrides.
 */
public class NioLocalFs extends ChecksumFs {
  /** Called by {@code AbstractFileSystem.createFileSystem} for {@code file:} URIs. */
  public NioLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(uri, conf));
  }

  /** {@code RawLocalFs} over {@link NioRawLocalFileSystem}. */
  static final class Raw extends DelegateToFileSystem {
    Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new NioRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1; // no default port for file:///
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true; // any local path is a valid name
    }
  }
}
