package jet.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS for the reader's connections (options tls, tlsCa, tlsCert, tlsKey, tlsServerHostname;
 * spec/spark.md, "Connection security"), as the Python SDK's TLS dialer: TLS from the first
 * byte, the server's certificate checked against tlsCa (else the JVM's trusted CAs) and its
 * name against tlsServerHostname (else the address's host), a client certificate where
 * tlsCert and tlsKey (PEM, the key PKCS#8) are given. One context per JVM and files.
 */
final class JetTls {
  private static final Map<String, SSLContext> CONTEXTS = new ConcurrentHashMap<>();

  private JetTls() {}

  /** {@code plain} (connected to {@code host}:{@code port}) wrapped in TLS, handshake done. */
  static Socket wrap(Socket plain, String host, int port, JetOptions opts) throws IOException {
    String name = opts.tlsServerHostname != null ? opts.tlsServerHostname : host;
    SSLSocket tls = (SSLSocket) context(opts).getSocketFactory().createSocket(plain, name, port, true);
    SSLParameters params = tls.getSSLParameters();
    params.setEndpointIdentificationAlgorithm("HTTPS"); // the name against the certificate
    if (!isAddress(name)) {
      params.setServerNames(List.of(new SNIHostName(name)));
    }
    tls.setSSLParameters(params);
    try {
      tls.startHandshake();
    } catch (IOException e) {
      tls.close();
      throw new IOException("jetstream-jvm: TLS handshake with " + host + ":" + port
          + " (checked as " + name + ") failed: " + e.getMessage(), e);
    }
    return tls;
  }

  private static boolean isAddress(String name) {
    return name.indexOf(':') >= 0 || name.matches("[0-9.]+");
  }

  private static SSLContext context(JetOptions opts) throws IOException {
    String key = opts.tlsCa + "\0" + opts.tlsCert + "\0" + opts.tlsKey;
    SSLContext found = CONTEXTS.get(key);
    if (found == null) {
      try {
        found = build(opts);
      } catch (GeneralSecurityException e) {
        throw new IOException("jetstream-jvm: TLS files: " + e.getMessage(), e);
      }
      CONTEXTS.put(key, found);
    }
    return found;
  }

  private static SSLContext build(JetOptions opts) throws IOException, GeneralSecurityException {
    TrustManagerFactory trust = null;
    if (opts.tlsCa != null) {
      KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
      store.load(null, null);
      int i = 0;
      for (Certificate c : certificates(opts.tlsCa, "tlsCa")) {
        store.setCertificateEntry("ca" + i++, c);
      }
      trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      trust.init(store);
    }
    KeyManagerFactory keys = null;
    if (opts.tlsCert != null) {
      Collection<? extends Certificate> chain = certificates(opts.tlsCert, "tlsCert");
      KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
      store.load(null, null);
      char[] none = new char[0];
      store.setKeyEntry("client", privateKey(opts.tlsKey), none, chain.toArray(new Certificate[0]));
      keys = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
      keys.init(store, none);
    }
    SSLContext context = SSLContext.getInstance("TLS");
    context.init(keys == null ? null : keys.getKeyManagers(),
        trust == null ? null : trust.getTrustManagers(), null);
    return context;
  }

  private static Collection<? extends Certificate> certificates(String path, String option)
      throws IOException, GeneralSecurityException {
    Collection<? extends Certificate> certs = CertificateFactory.getInstance("X.509")
        .generateCertificates(new ByteArrayInputStream(Files.readAllBytes(Paths.get(path))));
    if (certs.isEmpty()) {
      throw new IOException("jetstream-jvm option " + option + ": no certificate in " + path);
    }
    return certs;
  }

  /** The PKCS#8 PEM key of option tlsKey (EC, RSA or Ed25519). */
  private static PrivateKey privateKey(String path) throws IOException, GeneralSecurityException {
    String text = new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.US_ASCII);
    String begin = "-----BEGIN PRIVATE KEY-----";
    int start = text.indexOf(begin);
    int end = text.indexOf("-----END PRIVATE KEY-----");
    if (start < 0 || end < start) {
      throw new IOException("jetstream-jvm option tlsKey: " + path
          + " holds no PKCS#8 PEM key (BEGIN PRIVATE KEY); convert it with"
          + " 'openssl pkcs8 -topk8 -nocrypt'");
    }
    byte[] der = Base64.getMimeDecoder().decode(text.substring(start + begin.length(), end));
    GeneralSecurityException last = null;
    for (String algorithm : new String[] {"EC", "RSA", "Ed25519"}) {
      try {
        return KeyFactory.getInstance(algorithm).generatePrivate(new PKCS8EncodedKeySpec(der));
      } catch (GeneralSecurityException e) {
        last = e;
      }
    }
    throw last;
  }
}
