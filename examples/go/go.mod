module lockbroker.example/lock

go 1.19
