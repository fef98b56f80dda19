// module LoftControl
