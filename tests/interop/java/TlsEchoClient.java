// A Java Thrift client over mutual TLS, for tests/interop/test_interop_tls.py.
//
// Usage: java -cp libthrift.jar:slf4j-api.jar:. TlsEchoClient HOST PORT KEYSTORE.p12
//            TRUSTSTORE.p12 PASSWORD TEXT
//
// libthrift's TSSLTransportFactory with PKCS12 key and trust stores, framed transport,
// binary protocol. No generated code: the call is written with the protocol's own
// calls (echo is field 1, a string; the reply's field 0 is the result), so the test
// needs only Debian's libthrift-java. Prints the echoed string, or exits 1 with the
// exception on stderr.
import org.apache.thrift.TApplicationException;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.protocol.TField;
import org.apache.thrift.protocol.TMessage;
import org.apache.thrift.protocol.TMessageType;
import org.apache.thrift.protocol.TProtocolUtil;
import org.apache.thrift.protocol.TStruct;
import org.apache.thrift.protocol.TType;
import org.apache.thrift.transport.TSSLTransportFactory;
import org.apache.thrift.transport.TTransport;
import org.apache.thrift.transport.layered.TFramedTransport;

public class TlsEchoClient {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        TSSLTransportFactory.TSSLTransportParameters params =
            new TSSLTransportFactory.TSSLTransportParameters();
        params.setKeyStore(args[2], args[4], null, "PKCS12");
        params.setTrustStore(args[3], args[4], null, "PKCS12");
        TTransport socket = TSSLTransportFactory.getClientSocket(host, port, 10000, params);
        TTransport framed = new TFramedTransport(socket);
        TBinaryProtocol proto = new TBinaryProtocol(framed);
        try {
            proto.writeMessageBegin(new TMessage("echo", TMessageType.CALL, 7));
            proto.writeStructBegin(new TStruct("echo_args"));
            proto.writeFieldBegin(new TField("s", TType.STRING, (short) 1));
            proto.writeString(args[5]);
            proto.writeFieldEnd();
            proto.writeFieldStop();
            proto.writeStructEnd();
            proto.writeMessageEnd();
            framed.flush();

            TMessage reply = proto.readMessageBegin();
            if (reply.type == TMessageType.EXCEPTION) {
                throw TApplicationException.readFrom(proto);
            }
            if (reply.seqid != 7 || !"echo".equals(reply.name)) {
                throw new IllegalStateException("unexpected reply " + reply);
            }
            String result = null;
            proto.readStructBegin();
            while (true) {
                TField field = proto.readFieldBegin();
                if (field.type == TType.STOP) break;
                if (field.id == 0 && field.type == TType.STRING) {
                    result = proto.readString();
                } else {
                    TProtocolUtil.skip(proto, field.type);
                }
                proto.readFieldEnd();
            }
            proto.readStructEnd();
            proto.readMessageEnd();
            System.out.println(result);
        } finally {
            framed.close();
        }
    }
}
